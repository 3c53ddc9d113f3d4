// A multi-layer perceptron for classification: the math of the built-in `mlp` trainer.
//
// Layout, chosen for speed and for the data-parallel trainers to come:
//   - Batches are contiguous row-major matrices [batch, features]; every layer is one SGEMM over
//     the whole batch (OpenBLAS), never a loop over samples around BLAS.
//   - Layer l computes Z = X W_l + b_l with W_l stored [in, out] row-major; the bias add and the
//     activation (and dropout in training) are fused into one pass over Z after the GEMM.
//   - All parameters live in one contiguous vector (W_0, b_0, W_1, b_1, ...), and so do all
//     gradients, in the same order: an optimizer step is one loop, and an allreduce of the
//     gradients is one call on one buffer.
//   - Activation buffers are allocated on the first batch of a given size and reused; training
//     a batch allocates nothing.
//
// Loss: softmax cross-entropy on the logits. forward_backward() writes
// grad_scale * d(sum of per-sample losses)/d(params) into grads(); grad_scale = 1/batch gives the
// mean-loss gradient, and a data-parallel rank holding part of a global batch passes
// 1/global_batch so that summing the ranks' gradients gives the global mean.
//
// Determinism: the results depend only on the parameters, the inputs, the dropout Rng's state and
// the BLAS thread count (OpenBLAS splits SGEMM across threads without splitting the reduction
// dimension, so a fixed thread count gives bit-identical results).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/rng.h"
#include "trainers/network.h"

namespace hpctune::trainers {

enum class Activation { kRelu, kTanh, kSigmoid };

// "relu" | "tanh" | "sigmoid"; kInvalidArgument otherwise.
Result<Activation> parse_activation(const std::string& name);
const char* activation_name(Activation activation) noexcept;

struct MlpShape {
  int64_t inputs = 0;
  std::vector<int64_t> hidden;  // hidden layer widths; empty = softmax regression
  int64_t outputs = 0;          // number of classes
  Activation activation = Activation::kRelu;
  float dropout = 0.0f;  // inverted dropout on every hidden layer's output, training only; [0, 1)
};

// ParamBlock and BatchStats: network.h.

class Mlp {
 public:
  // kInvalidArgument for a non-positive size, a dropout outside [0, 1), or sizes past BLAS's int.
  static Result<Mlp> create(MlpShape shape);

  const MlpShape& shape() const noexcept { return shape_; }
  size_t num_params() const noexcept { return params_.size(); }
  std::span<float> params() noexcept { return params_; }
  std::span<const float> params() const noexcept { return params_; }
  std::span<float> grads() noexcept { return grads_; }
  std::span<const float> grads() const noexcept { return grads_; }
  const std::vector<ParamBlock>& blocks() const noexcept { return blocks_; }

  // Weights: He-normal (std sqrt(2/fan_in)) into ReLU layers, Glorot-uniform into tanh/sigmoid
  // layers and into the output layer. Biases: zero. Draws only from `rng`.
  void init(Rng& rng);

  // Inference (no dropout) on x [batch, inputs]; returns the logits [batch, outputs], valid until
  // the next call on this Mlp.
  const float* forward(const float* x, int64_t batch);

  // Loss and accuracy of a batch, without dropout and without touching grads().
  BatchStats evaluate(const float* x, const int32_t* labels, int64_t batch);

  // One training pass over a batch: forward (with dropout drawn from `dropout_rng`), softmax
  // cross-entropy, backward. Overwrites grads() with grad_scale * d(loss_sum)/d(params). Returns
  // the batch's loss and accuracy as seen in this forward pass (with dropout). Labels must be in
  // [0, outputs).
  BatchStats forward_backward(const float* x, const int32_t* labels, int64_t batch, float grad_scale, Rng& dropout_rng);

 private:
  explicit Mlp(MlpShape shape);
  int64_t layers() const noexcept { return static_cast<int64_t>(shape_.hidden.size()) + 1; }
  int64_t width(int64_t layer_output) const noexcept;  // output width of layer l
  int64_t fan_in(int64_t l) const noexcept { return l == 0 ? shape_.inputs : shape_.hidden[static_cast<size_t>(l - 1)]; }
  void ensure_capacity(int64_t batch);
  // Runs every layer; `train` applies dropout. Returns the logits buffer.
  float* run_forward(const float* x, int64_t batch, bool train, Rng* dropout_rng);
  const float* layer_input(const float* x, int64_t l, bool train) const noexcept;

  MlpShape shape_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<ParamBlock> blocks_;
  std::vector<size_t> w_offset_;  // per layer
  std::vector<size_t> b_offset_;

  int64_t capacity_ = 0;  // rows the buffers hold
  std::vector<std::vector<float>> act_;   // per hidden layer: post-activation, before dropout
  std::vector<std::vector<float>> mask_;  // per hidden layer: 0 or 1/(1-p) (dropout only)
  std::vector<std::vector<float>> drop_;  // per hidden layer: act * mask (dropout only)
  std::vector<float> logits_;
  std::vector<float> delta_a_;  // backward ping-pong, [capacity, widest layer]
  std::vector<float> delta_b_;
};

struct SgdOptions {
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;  // L2, on decaying blocks (weights) only
};

// SGD with momentum as PyTorch defines it (dampening 0):
//   g = grad + weight_decay * p;  v = momentum * v + g;  p -= lr * (nesterov ? g + momentum * v : v)
// The velocity starts at zero.
class SgdMomentum {
 public:
  SgdMomentum(size_t num_params, SgdOptions options) : options_(options), velocity_(num_params, 0.0f) {}
  void step(std::span<float> params, std::span<const float> grads, const std::vector<ParamBlock>& blocks, float lr) noexcept;
  std::span<const float> velocity() const noexcept { return velocity_; }

 private:
  SgdOptions options_;
  std::vector<float> velocity_;
};

// ---- BLAS set-up -------------------------------------------------------------------------------
// OpenBLAS keeps its kernel choice and thread count per process; these functions adjust that
// state and are the only places hpctune touches it.

// Sets the number of OpenBLAS threads (values < 1 mean 1). Call between trials, not during one.
void blas_set_threads(int threads) noexcept;

// Makes sure OpenBLAS runs kernels this CPU supports well. OpenBLAS 0.3.21 (Debian 12) does not
// recognise recent Xeons (Sapphire/Emerald Rapids) and falls back to its SSE3 "Prescott"
// kernels, which run SGEMM about 4-5x slower here. When OpenBLAS reports that fallback,
// OPENBLAS_CORETYPE is unset and the CPU has AVX-512 (or AVX2+FMA), this re-runs OpenBLAS's own
// dynamic-arch selection with the SkylakeX (or Haswell) kernels. A no-op in every other case
// (and for a BLAS built without DYNAMIC_ARCH). Runs once per process; thread-safe; call it before
// the first GEMM of a trial, never while another thread is inside BLAS.
void blas_select_kernels() noexcept;

// The OpenBLAS kernel family in use ("SkylakeX", "Haswell", ...; "unknown" if not reported).
std::string blas_core_name();

}  // namespace hpctune::trainers
