#include "trainers/classifier_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <limits>

#include "collectives/trainer_group.h"
#include "nn/checkpoint.h"
#include "trainers/packed_engine.h"
#include "trainers/trainer_settings.h"

namespace hpctune::trainers {

RankLayout layout_of(const collectives::TrainerGroup* g) {
  if (g == nullptr) return {};
  return {g->rank(), g->size(), g->data_rank(), g->data_size(), g->model_rank(), g->model_size()};
}

ClassifierRun::ClassifierRun(const std::string& kind_, const ClassifierSettings& s_, const ImageClassificationData& data_,
                             const TrialContext& ctx_, ClassifierSplit split_, nn::Network net_)
    : kind(kind_), who(kind_ + " trainer"), s(s_), data(data_), ctx(ctx_), lay(layout_of(ctx_.group)),
      split(std::move(split_)), net(std::move(net_)) {}

Status ClassifierRun::build_engine(EngineOptions options) {
  engine_options = std::move(options);
  HPCTUNE_ASSIGN(engine, make_gradient_engine(net, ctx.group, engine_options));
  optimizer = std::make_unique<nn::Optimizer>(engine->params().size(), s.optimizer);
  // The output layer's blocks are those at or past its first parameter, on the rank that holds it
  // (a pipeline's last stage).
  const auto [first_layer, last_layer] = engine->layer_range();
  const size_t rank_offset = net.param_range(first_layer, last_layer).first;
  const size_t head_offset = last_layer == net.num_layers() ? net.param_range(last_layer - 1, last_layer).first
                                                            : std::numeric_limits<size_t>::max();
  probe_blocks = engine->blocks();
  tune_blocks = engine->blocks();
  for (size_t i = 0; i < tune_blocks.size(); ++i) {
    if (tune_blocks[i].offset + rank_offset >= head_offset) continue;
    probe_blocks[i].frozen = true;
    tune_blocks[i].lr_scale = static_cast<float>(s.body_lr_scale);
  }
  shuffle_seed = derive_seed(ctx.seed, kShuffleStream);
  shuffle_rng.reseed(shuffle_seed);
  dropout_seed = derive_seed(derive_seed(ctx.seed, kDropoutStream), static_cast<uint64_t>(lay.rank));
  dropout_rng.reseed(dropout_seed);

  n_train = static_cast<int64_t>(split.train.size());
  batch = std::min(s.batch_size, n_train);
  const size_t features = static_cast<size_t>(data.train.features());
  const int64_t buffer_rows = std::max(batch, kEvalBatch);
  x.assign(static_cast<size_t>(buffer_rows) * features, 0.0f);
  y.assign(static_cast<size_t>(buffer_rows), 0);
  batches_per_epoch = (n_train + batch - 1) / batch;
  plan = make_lr_plan(s, batches_per_epoch);
  checkpointing = s.checkpoint && !ctx.trial_dir.empty();
  ckpt_path = checkpointing ? nn::checkpoint_path(ctx.trial_dir, lay.model_rank) : std::string();
  return Status::Ok();
}

void ClassifierRun::warn(const std::string& what) const {
  std::cerr << "hpctune " << kind << " trainer: trial " << ctx.trial_id << " attempt " << ctx.attempt
            << ": warning: " << what << std::endl;
}

void ClassifierRun::note(const std::string& what) const {
  // One write: the trials of a packed worker's slots note on their own threads.
  std::cerr << ("hpctune " + kind + " trainer: trial " + std::to_string(ctx.trial_id) + " attempt " +
                std::to_string(ctx.attempt) + ": " + what + "\n")
            << std::flush;
}

// The failed ranks fail with their own error, the others naming the cause, so that no rank goes
// on to a collective the others never reach. Without a group, `st` itself.
Status ClassifierRun::agree(Status st, const std::string& what) const {
  if (ctx.group == nullptr) return st;
  std::vector<double> failed{st.ok() ? 0.0 : 1.0};
  HPCTUNE_TRY(ctx.group->sum(failed));
  if (!st.ok()) return st;
  if (failed[0] > 0) return err(Errc::kFailed, what + " failed on another rank of the group (see its log)");
  return Status::Ok();
}

// The stage's layers with the model's manifest, so that other trials can load them by layer. A
// failed write leaves the previous checkpoint in place: a resume then repeats more epochs, which
// costs time but not correctness, so the trial goes on.
void ClassifierRun::save_checkpoint(EpochRunner& runner, int64_t epoch) {
  if (Status st = runner.to_host(*this); !st.ok()) {
    warn("no checkpoint written: " + st.error().message());
    return;
  }
  nn::Checkpoint c = nn::checkpoint_of(net, engine->layer_range().first, engine->layer_range().second);
  c.run_hash = hash;
  c.epoch = epoch;
  c.step = step;
  c.optimizer = optimizer->state();
  c.rngs = {shuffle_rng.state(), dropout_rng.state()};
  nlohmann::json last_json = nlohmann::json::object();
  for (const auto& [k, v] : last) last_json[k] = v;
  c.meta = {{"train_seconds", train_seconds}, {"images_trained", images_trained}, {"last", last_json}};
  Status st = nn::write_checkpoint(ckpt_path, c);
  if (!st.ok()) warn(st.error().message());
}

TrialResult ClassifierRun::stopped() {
  result.stopped = true;
  result.metrics = last;
  result.metrics["train_seconds"] = train_seconds;
  return result;
}

Status ClassifierRun::diverged(const nn::BatchStats& b, int64_t epoch, int64_t batch_no) const {
  if (std::isfinite(b.loss_sum)) return Status::Ok();
  return err(Errc::kFailed, who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                ", batch " + std::to_string(batch_no + 1) + "); try a smaller 'lr'");
}

// ---- what every runner shares ----------------------------------------------------------------

bool EpochRunner::stop_now(ClassifierRun& run, int64_t) { return run.ctx.stop_requested(); }

Result<EpochEnd> EpochRunner::finish(ClassifierRun& run) {
  return stop_now(run, run.step - 1) ? EpochEnd::kStopped : EpochEnd::kEvaluate;
}

Result<nn::BatchStats> EpochRunner::evaluate(ClassifierRun& run, const Dataset& d, const int64_t* idx, int64_t count,
                                             float* probs) {
  nn::BatchStats total;
  for (int64_t start = 0; start < count; start += kEvalBatch) {
    const int64_t n = std::min(kEvalBatch, count - start);
    float* pb = probs != nullptr ? probs + start * run.split.classes : nullptr;
    gather_rows(d, run.split, idx + start, n, run.x.data(), run.y.data());
    if (evaluates_alone()) {  // the leader alone, on the weights it fetched last (downpour) or holds
      total += run.net.evaluate(run.x.data(), run.y.data(), n, pb);
      continue;
    }
    HPCTUNE_ASSIGN(nn::BatchStats b, run.engine->evaluate(run.x.data(), run.y.data(), n, pb));
    total += b;
  }
  return total;
}

// The sync_* metrics of a data-parallel run by allreduce: the ring's 2 (D - 1) / D x 4 bytes a
// parameter, no staleness, every replica in every step.
void EpochRunner::add_metrics(ClassifierRun& run, TrialResult& result) {
  if (run.lay.data_size <= 1) return;
  const double d = static_cast<double>(run.lay.data_size);
  result.metrics["sync_bytes_per_step"] = 2.0 * (d - 1.0) / d * 4.0 * static_cast<double>(run.engine->params().size());
  result.metrics["sync_staleness_max"] = 0.0;
  result.metrics["sync_staleness_mean"] = 0.0;
  result.metrics["sync_replica_fraction_min"] = 1.0;
}

Result<std::unique_ptr<EpochRunner>> choose_epoch_runner(const ClassifierSettings& s, const RankLayout& lay,
                                                         const std::string& who) {
  const DataParallelSettings& p = s.parallel;
  // What the sync cannot do on this layout: the rules `hpctune validate` asks too
  // (TrainerCapabilities::layout_rules), so that the two never drift apart.
  const nlohmann::json read = {
      {"sync", sync_mode_name(p.sync)},
      {"gradient_compression", p.compression == GradientCompression::kOneBit ? "1bit" : "none"},
      {"min_replica_fraction", p.min_replica_fraction}};
  if (auto problem = classifier_capabilities().layout_rules.problem(read, lay.data_size, lay.model_size)) {
    return err(Errc::kInvalidArgument, who + ": setting '" + problem->first + "' = " +
                                           read.value(problem->first, nlohmann::json()).dump() + " must be " +
                                           problem->second);
  }
  if (p.sync == SyncMode::kHogwild) return make_hogwild_runner();
  if (lay.data_size > 1 && p.sync == SyncMode::kDownpour) return make_downpour_runner();
  if (lay.data_size > 1 && p.exchanges()) return make_exchange_runner();
  // In a worker with packing slots (packed_engine.h), a GPU trial trains in the pack when it fits,
  // and says why not otherwise.
  if (s.gpu && PackEngine::instance().slots() > 1) {
    const std::string kind = who.substr(0, who.find(' '));  // who: "<kind> trainer"
    return make_packed_runner(pack_refusal(kind, s, lay.size));
  }
  if (s.gpu) return lay.model_size > 1 ? make_gpu_pipeline_runner() : make_gpu_runner();
  return make_allreduce_runner();
}

// The run hash, the trial, its attempt and where it started: a later trial on the same group
// never reads an earlier one's leftovers.
uint64_t run_id_of(const ClassifierRun& run) {
  return nn::fnv1a64(std::to_string(run.hash) + "/" + std::to_string(run.ctx.trial_id) + "/" +
                     std::to_string(run.ctx.attempt) + "/" + std::to_string(run.start_epoch));
}

// Test aid (tests/test_downpour_kill.cpp, tests/test_replica_loss_campaign.cpp):
// HPCTUNE_TEST_KILL_REPLICA="<data rank>:<step>" makes that data replica of a multi-rank group kill
// itself (SIGKILL) before its minibatch <step> (downpour: its own minibatches counted over the
// trial; the other modes: the loop's step counter): a replica dying mid-trial. With
// HPCTUNE_TEST_KILL_ONCE_FILE set it happens only where that file can still be created (once per
// campaign, so that the attempt queued again runs normally).
void test_kill_replica(int data_rank, int64_t step) {
  static const char* spec = std::getenv("HPCTUNE_TEST_KILL_REPLICA");
  if (spec == nullptr || *spec == '\0') return;
  const std::string text(spec);
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return;
  if (std::atoi(text.substr(0, colon).c_str()) != data_rank || std::atoll(text.c_str() + colon + 1) != step) return;
  if (const char* once = std::getenv("HPCTUNE_TEST_KILL_ONCE_FILE"); once != nullptr && *once != '\0') {
    const int fd = ::open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return;  // killed once already
    ::close(fd);
  }
  std::raise(SIGKILL);
}

}  // namespace hpctune::trainers
