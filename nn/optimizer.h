// Optimizer: the parameter update of the classifier training loop (classifier_training.h), over one
// contiguous parameter vector and its gradient (network.h), as PyTorch 1.13 defines each method, so
// that a learning rate tuned here means the same thing there.
//
//   sgd    g = grad + wd * p                          (L2, decaying blocks only)
//          v = momentum * v + g                       (v starts at 0, so v_1 = g: dampening 0)
//          p -= lr * (nesterov ? g + momentum * v : v)            (momentum 0: p -= lr * g)
//   adam   g = grad + wd * p                          (L2, decaying blocks only)
//          m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2;  t = t + 1
//          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   adamw  p *= 1 - lr * wd                           (decoupled, decaying blocks only)
//          then adam with g = grad
//
// Weight decay applies only to ParamBlock::decay blocks (weights, not biases); parameters outside
// every block are updated without decay. A block's rate is lr * ParamBlock::lr_scale (AdamW's
// decoupled decay shrinks by that rate too, as a PyTorch parameter group with its own lr does). ParamBlock::frozen blocks (Network::freeze()) are skipped:
// their parameters and their entries of the moment buffers stay as they are (the step count t,
// one for the whole vector here, still advances). The state (the step count and the moment buffers) is
// exposed so that checkpoints can save and restore it: restoring it and the parameters continues
// bit-identically.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "nn/network.h"

namespace hpctune::nn {

enum class OptimizerKind { kSgd, kAdam, kAdamW };

// "sgd", "adam", "adamw"; kInvalidArgument otherwise.
Result<OptimizerKind> parse_optimizer_kind(const std::string& name);
const char* optimizer_kind_name(OptimizerKind kind) noexcept;

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  double momentum = 0.0;  // sgd
  bool nesterov = false;  // sgd
  double beta1 = 0.9;     // adam, adamw
  double beta2 = 0.999;   // adam, adamw
  double eps = 1e-8;      // adam, adamw
  double weight_decay = 0.0;
};

// What a checkpoint keeps of an optimizer.
struct OptimizerState {
  int64_t steps = 0;
  std::vector<std::vector<float>> buffers;  // sgd: {velocity} (empty without momentum); adam: {m, v}
};

class Optimizer {
 public:
  Optimizer(size_t num_params, OptimizerOptions options);

  // One update of `params` (num_params values) from `grads` at learning rate `lr`.
  void step(std::span<float> params, std::span<const float> grads, const std::vector<ParamBlock>& blocks,
            float lr) noexcept;

  const OptimizerOptions& options() const noexcept { return options_; }
  int64_t steps() const noexcept { return steps_; }
  OptimizerState state() const;
  // kInvalidArgument when the state does not fit this optimizer (another kind or size).
  Status set_state(const OptimizerState& state);

 private:
  void update_range(float* p, const float* g, size_t offset, size_t n, bool decay, float lr, double bc1,
                    double bc2) noexcept;

  OptimizerOptions options_;
  size_t num_params_;
  int64_t steps_ = 0;
  std::vector<std::vector<float>> buffers_;
};

}  // namespace hpctune::nn
