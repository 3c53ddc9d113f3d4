#include "trainers/classifier_training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <thread>

#include "common/rng.h"
#include "nn/blas.h"
#include "nn/denormals.h"
#include "nn/layers.h"  // dnnl_set_threads
#include "trainers/classifier_run.h"

namespace hpctune::trainers {

// Types, bounds and choices are checked by the reader against the declarations
// (classifier_settings.cpp), and the rules between settings by the kind's setting_rules there;
// what is left here is what neither can say.
Status parse_classifier_common(const SettingsReader& r, ClassifierSettings& s) {
  HPCTUNE_ASSIGN(s.data, r.string("data"));
  HPCTUNE_ASSIGN(s.standardize, r.boolean("standardize"));
  HPCTUNE_ASSIGN(s.val_fraction, r.number("val_fraction"));
  HPCTUNE_ASSIGN(const nlohmann::json data_seed, r.value("data_seed"));
  s.data_seed = data_seed.get<uint64_t>();  // >= 0 by its declaration; up to 2^64 - 1, as a campaign seed
  HPCTUNE_ASSIGN(s.max_train_samples, r.integer("max_train_samples"));
  HPCTUNE_ASSIGN(s.max_test_samples, r.integer("max_test_samples"));
  HPCTUNE_ASSIGN(std::string optimizer, r.string("optimizer"));
  auto kind = nn::parse_optimizer_kind(optimizer);
  if (!kind.ok()) return r.bad("optimizer", r.raw("optimizer"), kind.error().message());
  s.optimizer.kind = *kind;
  HPCTUNE_ASSIGN(const std::string device, r.string("device"));
  s.gpu = device == "gpu";
  HPCTUNE_ASSIGN(s.precision, r.string("precision"));
  HPCTUNE_ASSIGN(s.deterministic, r.boolean("deterministic"));
  HPCTUNE_ASSIGN(s.lr, r.number("lr"));
  HPCTUNE_ASSIGN(std::string schedule, r.string("lr_schedule"));
  s.lr_schedule = schedule == "constant" ? LrSchedule::kConstant : LrSchedule::kCosine;
  HPCTUNE_ASSIGN(std::string scaling, r.string("lr_scaling"));
  s.lr_scaling = scaling == "linear" ? LrScaling::kLinear : LrScaling::kNone;
  HPCTUNE_ASSIGN(s.base_batch_size, r.integer("base_batch_size"));
  HPCTUNE_ASSIGN(s.warmup_epochs, r.number("warmup_epochs"));
  HPCTUNE_ASSIGN(s.optimizer.momentum, r.number("momentum"));
  HPCTUNE_ASSIGN(s.optimizer.nesterov, r.boolean("nesterov"));
  HPCTUNE_ASSIGN(s.optimizer.beta1, r.number("beta1"));
  HPCTUNE_ASSIGN(s.optimizer.beta2, r.number("beta2"));
  HPCTUNE_ASSIGN(s.optimizer.eps, r.number("eps"));
  HPCTUNE_ASSIGN(s.optimizer.weight_decay, r.number("weight_decay"));
  HPCTUNE_ASSIGN(s.batch_size, r.integer("batch_size"));
  HPCTUNE_ASSIGN(s.epochs, r.integer("epochs"));
  HPCTUNE_ASSIGN(s.checkpoint, r.boolean("checkpoint"));
  HPCTUNE_ASSIGN(s.micro_batches, r.integer("micro_batches"));
  HPCTUNE_ASSIGN(s.save_predictions, r.boolean("save_predictions"));
  HPCTUNE_ASSIGN(const nlohmann::json classes, r.value("classes"));
  s.classes.clear();
  if (classes.is_array()) {
    for (const auto& c : classes) s.classes.push_back(c.get<int64_t>());
  } else {
    s.classes.push_back(classes.get<int64_t>());
  }
  if (auto problem = classes_problem(s.classes)) return r.bad("classes", r.raw("classes"), problem->must_be);
  HPCTUNE_ASSIGN(s.init_from, r.string("init_from"));
  HPCTUNE_ASSIGN(s.freeze, r.integer("freeze"));
  HPCTUNE_ASSIGN(s.head_epochs, r.integer("head_epochs"));
  // What no declaration says alone (data, precision with device, head_epochs against epochs): the
  // rules `hpctune validate` asks too (TrainerCapabilities::setting_rules).
  const auto rules = classifier_capabilities().setting_rules;
  nlohmann::json read = nlohmann::json::object();
  for (const auto& key : rules.reads) read[key] = r.raw(key.c_str());
  if (auto problem = rules.problem(read)) return r.bad(problem->first.c_str(), r.raw(problem->first.c_str()), problem->second);
  HPCTUNE_ASSIGN(s.body_lr_scale, r.number("body_lr_scale"));
  HPCTUNE_TRY(parse_data_parallel(r, s.parallel));
  if (s.gpu && (s.parallel.exchanges() || s.parallel.sync != SyncMode::kAllreduce)) {
    return r.bad("sync", r.raw("sync"), "allreduce without gradient_compression with device: gpu");
  }
  return Status::Ok();
}

double LrPlan::at(int64_t t) const noexcept {
  if (t < warmup) return start + (peak - start) * static_cast<double>(t) / static_cast<double>(warmup);
  if (schedule == LrSchedule::kConstant) return peak;
  const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  return peak * 0.5 * (1.0 + std::cos(std::numbers::pi * static_cast<double>(t - warmup) / span));
}

LrPlan make_lr_plan(const ClassifierSettings& s, int64_t batches_per_epoch) noexcept {
  LrPlan p;
  p.peak = s.lr;
  if (s.lr_scaling == LrScaling::kLinear) {
    p.peak = s.lr * static_cast<double>(s.batch_size) / static_cast<double>(s.base_batch_size);
  }
  p.total = std::max<int64_t>(1, batches_per_epoch * s.epochs);
  p.warmup = std::min<int64_t>(p.total, std::llround(s.warmup_epochs * static_cast<double>(batches_per_epoch)));
  p.start = p.peak > s.lr ? s.lr : 0.0;
  p.schedule = s.lr_schedule;
  return p;
}

// ---- the driver --------------------------------------------------------------------------------

namespace {

using Clock = ClassifierRun::Clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void shuffle(std::vector<int64_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

// The network of the settings, initialised from the trial's init stream (the output layer keeps
// this initialisation under init_from too: a fresh head), its first `freeze` layers frozen (before
// the engine is made: a pipeline stage copies the frozen blocks then).
Result<nn::Network> build_network(const std::string& who, const ClassifierSettings& s, const Dataset& train,
                                  int64_t classes, uint64_t seed) {
  auto created = nn::Network::create(nn::Shape{1, train.rows, train.cols}, s.layers, classes);
  if (!created.ok()) return std::move(created).error().with_context(who + ": building the network");
  nn::Network net = std::move(created).value();
  Rng init_rng(derive_seed(seed, kInitStream));
  net.init(init_rng);
  if (s.freeze > 0) {
    if (static_cast<size_t>(s.freeze) >= net.num_layers()) {
      return err(Errc::kInvalidArgument, who + ": setting 'freeze' = " + std::to_string(s.freeze) +
                                             ": the network has only " + std::to_string(net.num_layers() - 1) +
                                             " layers before its output layer");
    }
    HPCTUNE_TRY(net.freeze(static_cast<size_t>(s.freeze)));
  }
  return net;
}

EngineOptions engine_options_of(const ClassifierSettings& s, const RankLayout& lay, const EpochRunner& runner) {
  EngineOptions o;
  o.micro_batches = s.micro_batches;
  runner.adjust(o);
  if (s.parallel.debug_slowdown > 1.0 && lay.data_rank == s.parallel.debug_slowdown_rank) {
    const double extra = s.parallel.debug_slowdown - 1.0;
    o.after_compute = [extra](double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds * extra)); };
  }
  return o;
}

// After an epoch: validation, the report (the leader) and the checkpoint (data rank 0 of each stage).
Status end_epoch(ClassifierRun& run, EpochRunner& runner, int64_t epoch, const nn::BatchStats& train_stats,
                 Clock::time_point epoch_start) {
  const int64_t n_val = static_cast<int64_t>(run.split.val.size());
  HPCTUNE_ASSIGN(nn::BatchStats val, runner.evaluate(run, run.data.train, run.split.val.data(), n_val, nullptr));
  run.last = {{"val_loss", val.mean_loss()},
              {"val_accuracy", val.accuracy()},
              {"train_loss", train_stats.mean_loss()},
              {"train_accuracy", train_stats.accuracy()},
              {"epoch_seconds", seconds_since(epoch_start)}};
  if (!std::isfinite(val.loss_sum)) {
    return err(Errc::kFailed, run.who + ": training diverged (validation loss is not finite after epoch " +
                                  std::to_string(epoch) + "); try a smaller 'lr'");
  }
  run.result.step = epoch;
  if (run.lay.leader()) run.ctx.report(epoch, run.last);
  if (run.checkpointing && run.lay.data_rank == 0) run.save_checkpoint(runner, epoch);
  return Status::Ok();
}

}  // namespace

Result<TrialResult> train_classifier(const std::string& kind, const ClassifierSettings& s,
                                     const ImageClassificationData& data, const TrialContext& ctx) {
  const std::string who = kind + " trainer";
  HPCTUNE_ASSIGN(ClassifierSplit split, split_classifier_data(who, s, data));
  // For the whole trial, on this thread (denormals.h); first, so that BLAS threads started by the
  // two calls below inherit it.
  const nn::FlushDenormals flush_denormals;
  nn::blas_select_kernels();
  nn::blas_set_threads(ctx.threads);
  nn::dnnl_set_threads(ctx.threads);  // oneDNN's OpenMP pool is per calling thread: set it on this one
  HPCTUNE_ASSIGN(nn::Network net, build_network(who, s, data.train, split.classes, ctx.seed));
  HPCTUNE_ASSIGN(std::unique_ptr<EpochRunner> runner, choose_epoch_runner(s, layout_of(ctx.group), who));
  ClassifierRun run(kind, s, data, ctx, std::move(split), std::move(net));
  HPCTUNE_TRY(run.build_engine(engine_options_of(s, run.lay, *runner)));
  HPCTUNE_TRY(load_starting_state(run));
  HPCTUNE_TRY(runner->start(run));
  // A run continued from resume_from writes its starting state at once: the trial directory then
  // never holds an earlier interval's weights under this trial (what a PBT snapshot copies), even
  // when no epoch is left to train.
  if (run.checkpointing && run.lay.data_rank == 0 && !run.resumed_own && !ctx.resume_from.empty()) {
    run.save_checkpoint(*runner, run.start_epoch);
  }
  // Resumed with nothing left to train (the master died after the last epoch's report, before the
  // result was recorded): that report is sent again, so a judge of reports (PBT's pause at the end
  // of an interval) sees the step it has to decide on.
  if (run.start_epoch > 0 && run.start_epoch == s.epochs && !run.last.empty() && run.lay.leader()) {
    ctx.report(run.start_epoch, run.last);
  }
  if (runner->serves_only()) return runner->serve(run);

  std::vector<int64_t> order;
  for (int64_t epoch = run.start_epoch + 1; epoch <= s.epochs; ++epoch) {
    if (runner->polls_stop_at_epoch_start() && runner->stop_now(run, run.step - 1)) return run.stopped();
    const auto epoch_start = Clock::now();
    order = run.split.train;
    run.shuffle_rng.reseed(derive_seed(run.shuffle_seed, static_cast<uint64_t>(epoch)));
    shuffle(order, run.shuffle_rng);
    run.dropout_rng.reseed(derive_seed(run.dropout_seed, static_cast<uint64_t>(epoch)));
    nn::BatchStats train_stats;
    HPCTUNE_ASSIGN(const EpochEnd end, runner->train_epoch(run, epoch, order, train_stats));
    run.train_seconds += seconds_since(epoch_start);
    if (end == EpochEnd::kStopped) return run.stopped();
    run.images_trained += run.n_train;
    if (end == EpochEnd::kSkip) continue;  // only the leader validates, reports and writes checkpoints
    HPCTUNE_TRY(end_epoch(run, *runner, epoch, train_stats, epoch_start));
  }
  HPCTUNE_ASSIGN(const EpochEnd end, runner->finish(run));
  if (end == EpochEnd::kStopped) return run.stopped();
  if (end == EpochEnd::kSkip) {
    run.result.step = s.epochs;
    return run.result;
  }
  return finish_outputs(run, *runner);
}

Result<TrialResult> run_classifier_trial(const std::string& kind, const ClassifierSettings& s, DatasetCache* cache,
                                         const TrialContext& ctx) {
  std::error_code ec;
  if (!std::filesystem::is_directory(s.data, ec)) {
    return err(Errc::kInvalidArgument, kind + " trainer: setting 'data' = \"" + s.data + "\": no such directory");
  }
  DatasetOptions options;
  options.standardize = s.standardize;
  auto data = cache != nullptr ? cache->get(s.data, options) : load_idx_dataset(s.data, options);
  if (!data.ok()) {
    return std::move(data).error().with_context("while loading the dataset of setting 'data' = \"" + s.data + "\"");
  }
  return train_classifier(kind, s, **data, ctx);
}

}  // namespace hpctune::trainers
