// The packed epoch runner (packed_engine.h): in a worker with packing slots, a `device: gpu` trial
// whose settings fit the packed model trains each epoch in the process's pack engine, beside the
// other slots' trials; its host network and optimizer hold its state between rounds (checkpoints,
// validation on the host engine, predictions), as the GPU runner's do between checkpoints. Stops
// are polled at each epoch start (a round is one unit). A trial that cannot be packed trains on
// the GPU runner, and its log says why.
#include <cmath>
#include <cstdio>

#include "trainers/classifier_run.h"
#include "trainers/packed_engine.h"

namespace hpctune::trainers {

namespace {

class PackedRunner final : public EpochRunner {
 public:
  explicit PackedRunner(std::string refusal) : refusal_(std::move(refusal)) {}
  ~PackedRunner() override {
    if (id_ >= 0) PackEngine::instance().leave(id_);
  }

  Status start(ClassifierRun& run) override {
    if (refusal_.empty()) {
      auto joined = PackEngine::instance().join(shape_of(run));
      if (joined.ok()) {
        id_ = *joined;
        run.note("packed: trains in the pack of this worker's " + std::to_string(PackEngine::instance().slots()) +
                 " slots (the fused model of gpu/gpu_packed_mlp.h)");
        return Status::Ok();
      }
      refusal_ = joined.error().message();
    }
    if (refusal_.rfind("not packed: ", 0) != 0) refusal_ = "not packed: " + refusal_;
    run.note(refusal_ + "; trains alone on the GPU");
    alone_ = make_gpu_runner();
    return alone_->start(run);
  }

  Result<EpochEnd> train_epoch(ClassifierRun& run, int64_t epoch, const std::vector<int64_t>& order,
                               nn::BatchStats& stats) override {
    if (alone_) return alone_->train_epoch(run, epoch, order, stats);
    const int64_t batches = (run.n_train + run.batch - 1) / run.batch;
    const nn::OptimizerState before = run.optimizer->state();
    PackedEpoch e;
    e.params.assign(run.net.params().begin(), run.net.params().end());
    if (!before.buffers.empty()) e.velocity = before.buffers.front();
    e.order.assign(order.begin(), order.end());
    for (int64_t b = 0; b < batches; ++b) e.lrs.push_back(run.lr(run.step + b));
    e.momentum = static_cast<float>(run.s.optimizer.momentum);
    e.weight_decay = static_cast<float>(run.s.optimizer.weight_decay);
    // A stop that comes while the member waits for the others withdraws it from the round.
    HPCTUNE_ASSIGN(const bool trained, PackEngine::instance().train_epoch(id_, e, [&run] { return run.ctx.stop_requested(); }));
    if (!trained) return EpochEnd::kStopped;
    if (!std::isfinite(e.stats.loss_sum)) {
      return err(Errc::kFailed, run.who + ": training diverged (loss is not finite in epoch " + std::to_string(epoch) +
                                    ", in the pack); try a smaller 'lr'");
    }
    std::copy(e.params.begin(), e.params.end(), run.net.params().begin());
    nn::OptimizerState after{before.steps + batches, {}};
    if (!before.buffers.empty()) after.buffers.push_back(std::move(e.velocity));
    HPCTUNE_TRY(run.optimizer->set_state(after));
    run.step += batches;
    stats += e.stats;
    if (e.packed_with != packed_with_) {
      packed_with_ = e.packed_with;
      const std::string with = packed_with_ == 0 ? "alone in the pack"
                               : "packed with " + std::to_string(packed_with_) + " other trial" + (packed_with_ == 1 ? "" : "s");
      run.note(with + " on " + PackEngine::instance().device() + " (from epoch " + std::to_string(epoch) + ")");
    }
    return EpochEnd::kEvaluate;
  }

  Result<nn::BatchStats> evaluate(ClassifierRun& run, const Dataset& d, const int64_t* idx, int64_t count,
                                  float* probs) override {
    if (alone_) return alone_->evaluate(run, d, idx, count, probs);
    return EpochRunner::evaluate(run, d, idx, count, probs);  // the host's copy, on the host engine
  }

  Status to_host(ClassifierRun& run) override { return alone_ ? alone_->to_host(run) : Status::Ok(); }

 private:
  static PackShape shape_of(const ClassifierRun& run) {
    PackShape shape;
    shape.sizes.push_back(run.data.train.features());
    for (const nn::LayerSpec& l : run.s.layers) shape.sizes.push_back(l.units);
    shape.sizes.push_back(run.split.classes);
    shape.batch = run.batch;
    shape.n_train = run.n_train;
    shape.nesterov = run.s.optimizer.nesterov && run.s.optimizer.momentum != 0.0;
    shape.precision = run.s.precision;
    shape.train = &run.data.train;
    shape.label_map = run.split.label_map;
    return shape;
  }

  std::string refusal_;
  int64_t id_ = -1;
  int64_t packed_with_ = -1;
  std::unique_ptr<EpochRunner> alone_;
};

}  // namespace

std::unique_ptr<EpochRunner> make_packed_runner(const std::string& refusal) {
  return std::make_unique<PackedRunner>(refusal);
}

}  // namespace hpctune::trainers
