// GradientEngine: computes one global minibatch's gradient on this rank of a trainer group, for
// the classifier training loop (classifier_training.h), which owns the data, the optimizer, the
// schedule, checkpoints and reports, and is the same code for one rank and for many.
//
//   LocalEngine (no group, or a group of one rank): the whole network on the whole batch.
//   Data parallel (data > 1, model = 1): each replica runs its shard of the global batch (rows
//     [r * B / D, (r + 1) * B / D)) with grad_scale 1 / B, then TrainerGroup::sum_gradients():
//     every replica ends with (1/B) * the sum of the shards' gradients, the gradient of the global
//     mean loss, also when B is not divisible by D. Where the group offers memory the allreduce
//     reads without copying (TrainerGroup::gradient_buffer()), the network's gradients move there
//     when the engine is made.
//   Pipeline (model > 1): GPipe. Stage s runs the layers [first_s, last_s) for the micro-batches in
//     turn, sending activations forward and gradients back over MPI; a stage owns and updates
//     only the parameters of its layers (params()/grads() are that sub-range).
//   Both: pipelines replicated data-parallel; stage s's gradients are averaged over replicas.
//
// With the same seed, global batch and no dropout, every engine gives the gradient of the local
// engine to fp32 tolerance.
//
// Every rank passes the same global batch (every rank reads the same data in the same order); the
// engine uses the rows it needs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/rng.h"
#include "nn/network.h"
#include "collectives/trainer_group.h"

namespace hpctune::trainers {

class GradientEngine {
 public:
  virtual ~GradientEngine() = default;

  // The parameters this rank updates (all of them, or its pipeline stage's), the matching
  // gradients, and their blocks (offsets relative to params()).
  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  virtual const std::vector<nn::ParamBlock>& blocks() const = 0;
  // The layers [first, last) whose parameters params() holds (what this rank's checkpoint holds).
  virtual std::pair<size_t, size_t> layer_range() const = 0;

  // grads() = d(mean loss over the global batch)/d(params()). Returns the global batch's stats on
  // every rank (summed over the group), so every rank takes the same decisions (divergence).
  virtual Result<nn::BatchStats> train_batch(const float* x, const int32_t* labels, int64_t global_batch,
                                         Rng& dropout_rng) = 0;
  // Inference without dropout on a batch. Returns the stats on every rank; probs [batch, classes]
  // is written on the leader when not null (other ranks may pass null).
  virtual Result<nn::BatchStats> evaluate(const float* x, const int32_t* labels, int64_t batch, float* probs) = 0;
};

// The whole network on one rank.
class LocalEngine final : public GradientEngine {
 public:
  explicit LocalEngine(nn::Network& network) : network_(network) {}
  std::span<float> params() override { return network_.params(); }
  std::span<float> grads() override { return network_.grads(); }
  const std::vector<nn::ParamBlock>& blocks() const override { return network_.blocks(); }
  std::pair<size_t, size_t> layer_range() const override { return {0, network_.num_layers()}; }
  Result<nn::BatchStats> train_batch(const float* x, const int32_t* labels, int64_t global_batch, Rng& dropout_rng) override {
    return network_.forward_backward(x, labels, global_batch, 1.0f / static_cast<float>(global_batch), dropout_rng);
  }
  Result<nn::BatchStats> evaluate(const float* x, const int32_t* labels, int64_t batch, float* probs) override {
    return network_.evaluate(x, labels, batch, probs);
  }

 private:
  nn::Network& network_;
};

struct EngineOptions {
  int64_t micro_batches = 0;  // pipeline micro-batches per global batch; 0 = 2 * model ranks
  // Data parallel: train_batch() leaves this replica's own shard gradient in grads() and returns
  // its own stats, with no collective; the caller combines them (replica_exchange.h).
  bool local_gradients = false;
  // Called on every rank after its share of a minibatch is computed, before any collective, with
  // the seconds it took (the debug_slowdown benchmark aid, data_parallel.h); may be empty.
  std::function<void(double compute_seconds)> after_compute;
};

// LocalEngine when `group` is null or has one rank; otherwise the data-parallel / pipeline engine
// for the group's layout. kInvalidArgument when the layout cannot split this network (more model
// ranks than layers) or the batch. `network` must outlive the engine.
Result<std::unique_ptr<GradientEngine>> make_gradient_engine(nn::Network& network, collectives::TrainerGroup* group,
                                                             const EngineOptions& options = {});

}  // namespace hpctune::trainers
