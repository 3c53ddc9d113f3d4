// One classifier trial while it trains (classifier_training.h): the state every part of the loop
// shares, and the epoch runners, one per way of combining gradients, chosen once from the settings
// (as gloo picks an algorithm): the group's allreduce on the CPU (allreduce), the same on a GPU
// (gpu), a pipeline stage on a GPU (gpu with model > 1), the replica exchange of ssp, 1-bit
// compression and backup replicas (exchange), the parameter-server shards (downpour) and the
// threads of one rank (hogwild). Each owns its
// minibatch loop, its divergence check and stop points, and the sync metrics it adds.
// Internal to trainers/: the parts live in classifier_start.cpp (the starting state),
// epoch_runner_<mode>.cpp, classifier_outputs.cpp and classifier_training.cpp (the driver).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/rng.h"
#include "nn/network.h"
#include "nn/optimizer.h"
#include "trainers/classifier_data.h"
#include "trainers/classifier_training.h"
#include "trainers/gradient_engine.h"
#include "trainers/trainer.h"

namespace hpctune::collectives {
class TrainerGroup;
}

namespace hpctune::trainers {

inline constexpr int64_t kEvalBatch = 1024;

struct RankLayout {
  int rank = 0, size = 1, data_rank = 0, data_size = 1, model_rank = 0, model_size = 1;
  bool leader() const { return rank == 0; }
};
RankLayout layout_of(const collectives::TrainerGroup* g);

class EpochRunner;

struct ClassifierRun {
  using Clock = std::chrono::steady_clock;

  ClassifierRun(const std::string& kind, const ClassifierSettings& s, const ImageClassificationData& data,
                const TrialContext& ctx, ClassifierSplit split, nn::Network net);
  ClassifierRun(const ClassifierRun&) = delete;
  ClassifierRun& operator=(const ClassifierRun&) = delete;

  // The engine for ctx.group, the optimizer, the optimizer's two views of the blocks, the
  // streams, the batch buffers and the learning-rate plan.
  Status build_engine(EngineOptions options);

  const std::string kind, who;
  const ClassifierSettings& s;
  const ImageClassificationData& data;
  const TrialContext& ctx;
  const RankLayout lay;
  const ClassifierSplit split;
  nn::Network net;
  EngineOptions engine_options;
  std::unique_ptr<GradientEngine> engine;
  std::unique_ptr<nn::Optimizer> optimizer;
  // While probing (epochs 1..head_epochs) only the output layer's blocks train; afterwards the
  // others at lr * body_lr_scale.
  std::vector<nn::ParamBlock> probe_blocks, tune_blocks;
  const std::vector<nn::ParamBlock>& blocks(int64_t epoch) const {
    return epoch <= s.head_epochs ? probe_blocks : tune_blocks;
  }
  // Reseeded at every epoch start from (seed, epoch): an epoch's order and dropout masks do not
  // depend on where the run started (crash resume, a PBT interval).
  uint64_t shuffle_seed = 0, dropout_seed = 0;
  Rng shuffle_rng, dropout_rng;
  int64_t batch = 1, batches_per_epoch = 1, n_train = 0;
  LrPlan plan;
  float lr(int64_t t) const { return static_cast<float>(plan.at(t)); }
  std::vector<float> x;  // a minibatch or an evaluation batch
  std::vector<int32_t> y;

  // The starting state (classifier_start.cpp) and the counters.
  uint64_t hash = 0;  // the run identity a checkpoint must match
  bool checkpointing = false;
  std::string ckpt_path;
  bool resumed_own = false;
  int64_t start_epoch = 0, step = 0, images_trained = 0;
  double train_seconds = 0.0;
  protocol::Metrics last;  // the last epoch's report
  TrialResult result;

  void warn(const std::string& what) const;
  void note(const std::string& what) const;
  // In a group every rank decides together: when any rank failed, every rank fails (classifier_start.cpp).
  Status agree(Status st, const std::string& what) const;
  // This stage's layers, the optimizer, the counters and the streams; a failed write is a warning.
  void save_checkpoint(EpochRunner& runner, int64_t epoch);
  // The result of a stop: the last report plus train_seconds.
  TrialResult stopped();
  Status diverged(const nn::BatchStats& b, int64_t epoch, int64_t batch_no) const;
};

// Loads the starting state: the trial's own checkpoint, else resume_from, else init_from, else
// the fresh initialisation (classifier_training.h, step 2).
Status load_starting_state(ClassifierRun& run);

// What an epoch (or the run, after the last one) ended with on this rank.
enum class EpochEnd {
  kEvaluate,  // validate, report and checkpoint
  kStopped,   // a stop was requested
  kSkip,      // this rank neither validates nor reports (only the leader does, in some modes)
};

class EpochRunner {
 public:
  virtual ~EpochRunner() = default;
  // What the engine must do for this runner (local gradients for the exchange).
  virtual void adjust(EngineOptions&) const {}
  // Once the starting state is loaded: the device, the exchange, the threads or the shards.
  virtual Status start(ClassifierRun&) { return Status::Ok(); }
  // Whether this rank only serves (downpour's shard-only ranks), and the serving until the end.
  virtual bool serves_only() const { return false; }
  virtual Result<TrialResult> serve(ClassifierRun& run) { return run.result; }
  // The stop poll at a point every rank reaches having applied `clock`.
  virtual bool stop_now(ClassifierRun& run, int64_t clock);
  virtual bool polls_stop_at_epoch_start() const { return true; }
  // One epoch over `order`, adding the training stats to `stats`.
  virtual Result<EpochEnd> train_epoch(ClassifierRun& run, int64_t epoch, const std::vector<int64_t>& order,
                                       nn::BatchStats& stats) = 0;
  // After the last epoch: a final stop poll, or the end of the shards.
  virtual Result<EpochEnd> finish(ClassifierRun& run);
  // Rows `idx[0..count)` of `d`, with their probabilities into `probs` when not null.
  virtual Result<nn::BatchStats> evaluate(ClassifierRun& run, const Dataset& d, const int64_t* idx, int64_t count,
                                          float* probs);
  // Brings the weights and optimizer state to the host copy that checkpoints are written from.
  virtual Status to_host(ClassifierRun&) { return Status::Ok(); }
  // The sync_* metrics and events of the mode.
  virtual void add_metrics(ClassifierRun& run, TrialResult& result);

 protected:
  virtual bool evaluates_alone() const { return false; }  // the leader evaluates on its own weights
  // The minibatches of an epoch with the stop poll every kStopPollBatches (at clock step - lag - 2);
  // body(start, n, batch_no) trains one.
  template <class Body>
  Result<EpochEnd> each_batch(ClassifierRun& run, int64_t lag, int64_t& batch_no, Body body) {
    for (int64_t start = 0; start < run.n_train; start += run.batch, ++batch_no) {
      if (batch_no % kStopPollBatches == 0 && batch_no > 0 && stop_now(run, run.step - lag - 2)) return EpochEnd::kStopped;
      HPCTUNE_TRY(body(start, std::min(run.batch, run.n_train - start), batch_no));
    }
    return EpochEnd::kEvaluate;
  }
};

// The runner for the settings and the layout, or kInvalidArgument for a layout the mode cannot use.
Result<std::unique_ptr<EpochRunner>> choose_epoch_runner(const ClassifierSettings& s, const RankLayout& lay,
                                                         const std::string& who);

std::unique_ptr<EpochRunner> make_allreduce_runner();
std::unique_ptr<EpochRunner> make_gpu_runner();
std::unique_ptr<EpochRunner> make_gpu_pipeline_runner();
std::unique_ptr<EpochRunner> make_exchange_runner();
std::unique_ptr<EpochRunner> make_downpour_runner();
std::unique_ptr<EpochRunner> make_hogwild_runner();

// The identity that tags the replica messages of this run (replica_exchange.h, downpour.h).
uint64_t run_id_of(const ClassifierRun& run);

// Test aid: HPCTUNE_TEST_KILL_REPLICA="<data rank>:<step>" (classifier_training.cpp).
void test_kill_replica(int data_rank, int64_t step);

// The predictions, the final metrics and the artifacts (classifier_training.h, step 4).
Result<TrialResult> finish_outputs(ClassifierRun& run, EpochRunner& runner);

}  // namespace hpctune::trainers
