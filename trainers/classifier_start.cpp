// The starting state of a classifier trial (classifier_training.h, step 2): the first of
//   a. the trial's own checkpoint of this run (a crash resume of the same attempt),
//   b. ctx.resume_from (PBT: the whole state of a paused run, this trial's settings),
//   c. init_from (transfer: every layer but the output layer, a fresh optimizer),
//   d. the fresh initialisation (already in the network).
// In a group every rank reads the source itself, and a failure on any rank fails every rank.
#include <filesystem>
#include <vector>

#include "collectives/trainer_group.h"
#include "nn/checkpoint.h"
#include "trainers/classifier_run.h"

namespace hpctune::trainers {

namespace {

// The run identity a checkpoint must match to resume (checkpoint.h): everything that shapes the
// trajectory. `source` identifies the contents of ctx.resume_from (0 without one): a paused trial
// resumed from another checkpoint is another run, even under the same settings and path, so that
// a checkpoint of its earlier interval never wins over the weights it was told to continue from.
uint64_t config_hash(const ClassifierRun& run, uint64_t source) {
  nlohmann::json settings = run.ctx.settings();
  settings.erase("checkpoint");
  settings.erase("save_predictions");
  // Where it trains is not what it trains: a trial's checkpoint resumes on the other backend
  // (classifier_gpu.h), the same run continued.
  for (const char* key : {"device", "precision", "deterministic"}) settings.erase(key);
  const RankLayout& l = run.lay;
  std::string text = "kind=" + run.kind + "\nnet=" + run.net.describe() + "\nsettings=" + settings.dump() +
                     "\nseed=" + std::to_string(run.ctx.seed) + "\nlayout=" + std::to_string(l.data_size) + "x" +
                     std::to_string(l.model_size) + "\nstage=" + std::to_string(l.model_rank);
  if (!run.ctx.resume_from.empty()) text += "\nresume_from=" + run.ctx.resume_from + "#" + std::to_string(source);
  return nn::fnv1a64(text);
}

// FNV-1a 64 over a checkpoint's state (counters, parameters, optimizer buffers): what a resume
// continues from.
uint64_t state_digest(const nn::Checkpoint& c) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  };
  for (int64_t v : {c.epoch, c.step, c.optimizer.steps}) mix(&v, sizeof v);
  mix(&c.model_hash, sizeof c.model_hash);
  mix(c.params.data(), c.params.size() * sizeof(float));
  for (const auto& b : c.optimizer.buffers) mix(b.data(), b.size() * sizeof(float));
  return h;
}

// Whether `path` lies below the directory `root` (lexically).
bool lies_below(const std::string& root, const std::string& path) {
  const std::string top = std::filesystem::path(root).lexically_normal().string() + "/";
  const std::string full = std::filesystem::path(path).lexically_normal().string();
  return !root.empty() && full.size() > top.size() && full.compare(0, top.size(), top) == 0;
}

// The checkpoint `path` names: a checkpoint file, or a trial (or snapshot) directory of
// checkpoint-stage*.bin files, joined. Below `root` (when not ""), opened from it without following
// a link (nn::read_checkpoint_under). kInvalidArgument or kIo naming `setting` and the path.
Result<nn::Checkpoint> read_source_checkpoint(const std::string& who, const std::string& setting,
                                              const std::string& path, const std::string& root = "") {
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(path, ec);
  auto read = !root.empty() ? nn::read_checkpoint_under(root, path)
              : dir         ? nn::read_trial_checkpoint(path)
                            : nn::read_checkpoint(path);
  const std::string where = who + ": " + setting + " \"" + path + "\": ";
  if (!read.ok()) {
    const Errc code = read.error().code() == Errc::kIo ? Errc::kIo : Errc::kInvalidArgument;
    if (read.error().code() == Errc::kNotFound) {
      return err(code, where + (dir ? "the directory holds no checkpoint-stage*.bin" : "no such checkpoint file or directory"));
    }
    return err(code, where + read.error().message());
  }
  if (read->manifest.empty()) {
    return err(Errc::kInvalidArgument, where + "a checkpoint without a layer manifest (version 1) loads into no other trial");
  }
  return read;
}

// The optimizer state of another run made to fit `options`: SGD's velocity buffer exists only
// with momentum, and PBT may move momentum to or from 0 (a missing velocity starts at 0, as in a
// fresh run; a velocity no longer used is dropped). Anything else is left to set_state() to refuse.
nn::OptimizerState fit_optimizer_state(nn::OptimizerState st, const nn::OptimizerOptions& options, size_t params) {
  if (options.kind != nn::OptimizerKind::kSgd) return st;
  const size_t want = options.momentum != 0.0 ? 1 : 0;
  if (st.buffers.size() == 0 && want == 1) st.buffers.assign(1, std::vector<float>(params, 0.0f));
  else if (st.buffers.size() == 1 && want == 0) st.buffers.clear();
  return st;
}

void restore_counters(ClassifierRun& run, const nn::Checkpoint& c) {
  run.start_epoch = c.epoch;
  run.step = c.step;
  run.result.step = c.epoch;
  if (c.meta.contains("last") && c.meta["last"].is_object()) {
    for (auto it = c.meta["last"].begin(); it != c.meta["last"].end(); ++it) {
      if (it.value().is_number()) run.last[it.key()] = it.value().get<double>();
    }
  }
}

// Why the trial's own checkpoint cannot continue this run ("" when it can).
std::string own_checkpoint_problem(const ClassifierRun& run, const nn::Checkpoint& c) {
  const auto range = run.engine->layer_range();
  if (c.run_hash != run.hash) return "it belongs to another run (another model, settings, seed, layout or resume_from)";
  if (!c.manifest.empty() && (c.first_layer != range.first || c.last_layer != range.second)) {
    return "it holds other layers than this stage's";
  }
  if (c.params.size() != run.engine->params().size()) return "its parameter count differs";
  if (c.rngs.size() != 2) return "it does not hold the loop's 2 random streams";
  if (c.epoch > run.s.epochs) return "it is past the last epoch";
  nn::Optimizer probe(run.engine->params().size(), run.s.optimizer);
  Status st = probe.set_state(c.optimizer);
  return st.ok() ? std::string() : st.error().message();
}

// a. Resumes only when every rank of the group holds a valid checkpoint of the same epoch;
// otherwise a warning names the reason (a corrupt or foreign checkpoint never trains into this trial).
Status resume_own_checkpoint(ClassifierRun& run) {
  nn::Checkpoint c;
  std::string problem;
  auto read = nn::read_checkpoint(run.ckpt_path);
  bool valid = false;
  if (read.ok()) {
    c = std::move(read).value();
    problem = own_checkpoint_problem(run, c);
    valid = problem.empty();
  } else if (read.error().code() != Errc::kNotFound) {
    problem = read.error().message();
  }
  bool agreed = valid;
  if (run.ctx.group != nullptr) {
    const double e = valid ? static_cast<double>(c.epoch) : 0.0;
    std::vector<double> v{valid ? 1.0 : 0.0, e, e * e};
    HPCTUNE_TRY(run.ctx.group->sum(v));
    const double n = static_cast<double>(run.lay.size);
    agreed = v[0] == n && v[2] * n == v[1] * v[1];
    if (valid && !agreed && problem.empty()) problem = "another rank of the group cannot resume from the same epoch";
  }
  if (!problem.empty()) {
    const std::string instead = !run.ctx.resume_from.empty() ? "from resume_from"
                                : !run.s.init_from.empty()   ? "from init_from"
                                                             : "from scratch";
    run.warn("ignoring checkpoint " + run.ckpt_path + " and starting " + instead + ": " + problem);
  }
  if (!agreed) return Status::Ok();
  std::copy(c.params.begin(), c.params.end(), run.engine->params().begin());
  HPCTUNE_TRY(run.optimizer->set_state(c.optimizer));
  run.train_seconds = c.meta.value("train_seconds", 0.0);
  run.images_trained = c.meta.value("images_trained", int64_t{0});
  restore_counters(run, c);
  run.resumed_own = true;
  return Status::Ok();
}

// b. The whole state of the paused run: every layer, the optimizer's buffers for this rank's
// layers, the counters and the last metrics; the settings (lr, momentum, ...) are this trial's.
Status load_resume_from(ClassifierRun& run, const nn::Checkpoint& source) {
  Status st = [&]() -> Status {
    const std::string where = run.who + ": resume_from \"" + run.ctx.resume_from + "\": ";
    if (source.epoch > run.s.epochs) {
      return err(Errc::kInvalidArgument, where + "its epoch " + std::to_string(source.epoch) +
                                             " is past setting 'epochs' = " + std::to_string(run.s.epochs));
    }
    Status loaded = nn::load_model(run.net, source);
    if (!loaded.ok()) return err(Errc::kInvalidArgument, where + loaded.error().message());
    auto part = nn::slice_checkpoint(source, run.engine->layer_range().first, run.engine->layer_range().second);
    if (!part.ok()) return err(Errc::kInvalidArgument, where + part.error().message());
    Status set = run.optimizer->set_state(fit_optimizer_state(part->optimizer, run.s.optimizer, run.engine->params().size()));
    if (!set.ok()) return err(Errc::kInvalidArgument, where + set.error().message());
    return Status::Ok();
  }();
  HPCTUNE_TRY(run.agree(std::move(st), "loading resume_from \"" + run.ctx.resume_from + "\""));
  restore_counters(run, source);
  if (run.lay.leader()) {
    run.note("resumed from " + run.ctx.resume_from + " at epoch " + std::to_string(source.epoch) +
             " (weights, optimizer state and counters; this trial's settings)");
  }
  return Status::Ok();
}

// c. Transfer: every layer but the output from the source; the head keeps its fresh
// initialisation, also when its size is the source's (the classes mean something else).
Status load_init_from(ClassifierRun& run) {
  const ClassifierSettings& s = run.s;
  Status st = [&]() -> Status {
    HPCTUNE_ASSIGN(const nn::Checkpoint c, read_source_checkpoint(run.who, "init_from", s.init_from));
    Status loaded = nn::load_model(run.net, c, /*skip_output=*/true);
    if (!loaded.ok()) return err(Errc::kInvalidArgument, run.who + ": init_from \"" + s.init_from + "\": " + loaded.error().message());
    if (run.lay.leader()) {
      run.note("initialised " + std::to_string(run.net.num_layers() - 1) + " layers from " + s.init_from +
               " (epoch " + std::to_string(c.epoch) + " of its run), a new output layer of " +
               std::to_string(run.split.classes) + " classes, " + std::to_string(s.freeze) + " layers frozen");
    }
    return Status::Ok();
  }();
  return run.agree(std::move(st), "loading init_from \"" + s.init_from + "\"");
}

}  // namespace

Status load_starting_state(ClassifierRun& run) {
  // resume_from is read on every rank before the run hash, which depends on its contents.
  nn::Checkpoint source;
  uint64_t source_digest = 0;
  if (!run.ctx.resume_from.empty()) {
    // The store checked it below the campaign's trial directories (<db>.trials, where this trial's
    // is) when it read the row; opened from there without following a link, one swapped in since
    // is refused here, not followed.
    const std::string trials = std::filesystem::path(run.ctx.trial_dir).parent_path().string();
    const std::string root = lies_below(trials, run.ctx.resume_from) ? trials : std::string();
    auto read = read_source_checkpoint(run.who, "resume_from", run.ctx.resume_from, root);
    Status st = read.ok() ? Status::Ok() : Status(std::move(read).error());
    if (read.ok()) source = std::move(read).value();
    HPCTUNE_TRY(run.agree(std::move(st), "reading resume_from \"" + run.ctx.resume_from + "\""));
    source_digest = state_digest(source);
  }
  run.hash = config_hash(run, source_digest);
  if (run.checkpointing) HPCTUNE_TRY(resume_own_checkpoint(run));
  if (run.resumed_own) return Status::Ok();
  if (!run.ctx.resume_from.empty()) return load_resume_from(run, source);
  if (!run.s.init_from.empty()) return load_init_from(run);
  return Status::Ok();
}

}  // namespace hpctune::trainers
