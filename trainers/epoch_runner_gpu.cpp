// The epoch runners on a GPU (device: gpu): the whole network on each rank (classifier_gpu.h; a
// data-parallel group's replicas sum their gradients with NCCL where every rank has its own GPU,
// else host-staged) or one pipeline stage on each rank (model > 1, classifier_gpu_pipeline.h; the
// stages pass activations and gradients with NCCL send/receive or host-staged). The backend says
// which and why, and the leader logs it. The state loaded on the host goes to the device at the
// start; the host's network and optimizer are then the copy that checkpoints are written from.
// Nothing waits per step: the stats are read every kStopPollBatches minibatches and at the end of
// the epoch.
#include <cmath>
#include <cstdio>

#include "trainers/classifier_gpu.h"
#include "trainers/classifier_gpu_pipeline.h"
#include "trainers/classifier_run.h"

namespace hpctune::trainers {

namespace {

// The whole network on this rank's GPU (one rank, or a data-parallel group).
struct WholeNetwork {
  using Backend = ClassifierGpu;
  static Result<std::unique_ptr<Backend>> make(ClassifierRun& run, const ClassifierGpuOptions& options) {
    return ClassifierGpu::create(run.net, *run.optimizer, run.data.train, run.data.test, run.split.label_map,
                                 run.ctx.group, options);
  }
  static Status to_host(Backend& gpu, ClassifierRun& run) { return gpu.download(run.net, *run.optimizer); }
};

// This model rank's stage of the layers (the engine's layer_range(), as the checkpoints hold them).
struct PipelineStage {
  using Backend = ClassifierGpuPipeline;
  static Result<std::unique_ptr<Backend>> make(ClassifierRun& run, const ClassifierGpuOptions& options) {
    const int64_t micro = run.engine_options.micro_batches > 0 ? run.engine_options.micro_batches : 2 * run.lay.model_size;
    return ClassifierGpuPipeline::create(run.net, run.engine->layer_range(), run.engine->params(), *run.optimizer,
                                         run.data.train, run.data.test, run.split.label_map, *run.ctx.group, options,
                                         micro);
  }
  static Status to_host(Backend& gpu, ClassifierRun& run) { return gpu.download(run.engine->params(), *run.optimizer); }
};

template <class Layout>
class GpuRunner final : public EpochRunner {
 public:
  Status start(ClassifierRun& run) override {
    ClassifierGpuOptions options;
    options.precision = run.s.precision;
    options.deterministic = run.s.deterministic;
    options.max_batch = std::max(run.batch, kEvalBatch);
    options.specs = run.s.layers;
    auto made = Layout::make(run, options);
    // Every rank agrees, so that no rank waits in a collective for one whose GPU failed.
    Status st = made.ok() ? Status::Ok() : Status(std::move(made).error());
    HPCTUNE_TRY(run.agree(std::move(st), "setting up the GPU"));
    gpu_ = std::move(made).value();
    HPCTUNE_TRY(gpu_->join_group());
    if (run.lay.leader()) std::fprintf(stderr, "%s: %s\n", run.who.c_str(), gpu_->description().c_str());
    return Status::Ok();
  }

  Result<EpochEnd> train_epoch(ClassifierRun& run, int64_t epoch, const std::vector<int64_t>& order,
                               nn::BatchStats& stats) override {
    int64_t batch_no = 0;
    const uint64_t dropout = derive_seed(run.dropout_seed, static_cast<uint64_t>(epoch));
    return each_batch(run, 0, batch_no, [&](int64_t start, int64_t n, int64_t no) -> Status {
      HPCTUNE_TRY(gpu_->train_batch(std::span<const int64_t>(order.data() + start, static_cast<size_t>(n)),
                                    run.blocks(epoch), run.lr(run.step++), dropout, static_cast<uint64_t>(no) << 32));
      if ((no + 1) % kStopPollBatches != 0 && start + n < run.n_train) return Status::Ok();
      HPCTUNE_ASSIGN(nn::BatchStats b, gpu_->take_stats());
      if (!std::isfinite(b.loss_sum)) {
        return err(Errc::kFailed, run.who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                      ", by batch " + std::to_string(no + 1) + "); try a smaller 'lr'");
      }
      stats += b;
      return Status::Ok();
    });
  }

  Result<nn::BatchStats> evaluate(ClassifierRun& run, const Dataset& d, const int64_t* idx, int64_t count,
                                  float* probs) override {
    nn::BatchStats total;
    for (int64_t start = 0; start < count; start += kEvalBatch) {
      const int64_t n = std::min(kEvalBatch, count - start);
      float* pb = probs != nullptr ? probs + start * run.split.classes : nullptr;
      HPCTUNE_ASSIGN(nn::BatchStats b, gpu_->evaluate(&d == &run.data.test,
                                                      std::span<const int64_t>(idx + start, static_cast<size_t>(n)), pb));
      total += b;
    }
    return total;
  }

  Status to_host(ClassifierRun& run) override { return Layout::to_host(*gpu_, run); }

 private:
  std::unique_ptr<typename Layout::Backend> gpu_;
};

}  // namespace

std::unique_ptr<EpochRunner> make_gpu_runner() { return std::make_unique<GpuRunner<WholeNetwork>>(); }
std::unique_ptr<EpochRunner> make_gpu_pipeline_runner() { return std::make_unique<GpuRunner<PipelineStage>>(); }

}  // namespace hpctune::trainers
