// GpuNetwork: the built-in classifiers' network (the `mlp` and `cnn` trainers' nn::Network: dense,
// conv, maxpool and dropout layers, softmax cross-entropy on the logits) trained on one GPU through
// the CUDA library, with its optimizer (GpuOptimizer) and the data set held on the device
// (GpuDataset). One trainer, two backends: the parameters, gradients and optimizer buffers are
// single vectors in nn::Network's and nn::Optimizer's layout, so they move to and from the CPU's
// network, its checkpoints (nn/checkpoint.h) and predictions as they are, and a trial moves between
// CPU and GPU at any epoch.
//
// This folder does not include nn/ (tools/layers.txt): the trainer describes its network as
// GpuLayerDesc values (trainers/ translates nn::Network's layers).
//
// Kernels: dense layers are cuBLAS GEMMs with one fused bias(+activation) pass; conv is cuDNN
// (forward, backward data and backward filter; the bias and activation in the fused pass), maxpool
// is an own kernel keeping the argmax; dropout an own kernel drawing from a counter-based generator
// (splitmix64 of a key from (seed, offset) plus the element's index: gpu_library_abi.h's
// dropout_forward), so masks depend only on the seed and offset the loop passes (they differ from
// the CPU's masks); dropout layer j of the network uses offset dropout_offset * 1024 + j. The mask
// is recomputed in the backward pass, not stored. Activations are NCHW, sample-major, as nn/.
//
// Precision (GpuPrecision): fp32 (strict), tf32 (TF32 tensor cores for GEMMs and convolutions) and
// bf16 (the dense layers' GEMM inputs rounded to bf16, fp32 accumulation; convolutions run in TF32
// under bf16; parameters, gradients and optimizer state stay fp32: fp32 master weights).
// Deterministic mode picks only algorithms cuDNN reports deterministic; the bias gradients and
// max-pool backward never use atomics in either mode, so two runs with the same seed end
// bit-identical (the loss sum in take_stats() is summed with atomics: its last bits may differ).
//
// Conv padding: cuDNN pads symmetrically, so a conv layer whose "same" padding nn/ splits unevenly
// (stride > 1 and an odd total: one more row/column low-right) is refused by create() with
// kUnavailable, as is pad_top != pad_left; the default CNN (stride 1, odd kernels) is symmetric.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "gpu/gpu_context.h"

namespace hpctune::gpu {

enum class GpuPrecision { kFp32, kTf32, kBf16 };
// "fp32" | "tf32" | "bf16"; kInvalidArgument otherwise.
Result<GpuPrecision> parse_gpu_precision(const std::string& name);
const char* gpu_precision_name(GpuPrecision p) noexcept;

enum class GpuActivation { kNone, kRelu, kTanh, kSigmoid };

// One layer, as nn/layers.h defines it; shapes are per sample (channels, height, width).
struct GpuLayerDesc {
  enum class Kind { kDense, kConv, kMaxpool, kDropout } kind = Kind::kDense;
  int64_t in_c = 0, in_h = 1, in_w = 1;
  int64_t out_c = 0, out_h = 1, out_w = 1;
  GpuActivation activation = GpuActivation::kNone;  // dense, conv
  int64_t kernel = 0, stride = 1;                   // conv (square, odd), maxpool (size, stride)
  int64_t pad_top = 0, pad_left = 0;                // conv: the low padding ("same": (k - 1) / 2 and the odd extra low-right as nn/)
  double rate = 0.0;                                // dropout
  // Parameters (dense: W [in, out] row-major then b [out]; conv: W [out_c, in_c, k, k] then b [out_c]).
  size_t num_params() const noexcept;
};

struct GpuNetworkOptions {
  GpuPrecision precision = GpuPrecision::kFp32;
  bool deterministic = false;
  int64_t max_batch = 128;  // the largest batch forward_backward() and evaluate() take
  // A pipeline stage (trainers/: a network's layers [first, last) on one model rank of a group):
  // a stage after the first computes the gradient of its input (the previous stage's activation);
  // only the last stage's output is the logits (its classes), and a stage before it takes 0 classes.
  bool first_stage = true, last_stage = true;
};

struct GpuStepStats {
  double loss_sum = 0.0;
  int64_t correct = 0;
  int64_t count = 0;
};

class GpuNetwork {
 public:
  // kInvalidArgument for layers that do not chain (a layer's input is not the previous output) or
  // sizes out of bounds; kUnavailable when a conv layer is asked for and the library has no cuDNN.
  // `params` in the layers' order (the sum of num_params()). The context must outlive the network.
  static Result<GpuNetwork> create(const GpuContext& ctx, std::vector<GpuLayerDesc> layers, int64_t classes,
                                   std::span<const float> params, const GpuNetworkOptions& options);
  GpuNetwork(GpuNetwork&&) noexcept;
  GpuNetwork& operator=(GpuNetwork&&) noexcept;
  ~GpuNetwork();

  size_t num_params() const noexcept;
  float* d_params() const noexcept;  // device memory, num_params() floats
  float* d_grads() const noexcept;
  Status set_params(std::span<const float> host);
  Result<std::vector<float>> params() const;  // waits for queued work
  Result<std::vector<float>> grads() const;

  // grads = grad_scale * d(sum of per-sample losses)/d(params) over the batch (zeroed first unless
  // accumulate), as nn::Network::forward_backward. d_x [batch, input], d_labels [batch] are device
  // memory; batch <= max_batch. Dropout masks from (dropout_seed, dropout_offset): the loop passes
  // its stream's seed and a counter, so masks are deterministic. Loss and correct count add to the
  // stats (take_stats()).
  Status forward_backward(const float* d_x, const int32_t* d_labels, int64_t batch, float grad_scale,
                          uint64_t dropout_seed, uint64_t dropout_offset, bool accumulate = false);
  // Inference without dropout; d_probs [batch, classes] (device) is written when not null. Its loss
  // and correct count add to the stats too.
  Status evaluate(const float* d_x, const int32_t* d_labels, int64_t batch, float* d_probs);
  // Loss sum, correct count and images since the last call (waits for the queued work).
  Result<GpuStepStats> take_stats();

  // Pipeline stages (GPipe: every micro-batch forward, then every one backward in reverse order).
  // A micro-batch is rows [row0, row0 + n) of the stage's buffers (row0 + n <= max_batch), so that
  // the micro-batches of a minibatch keep their activations until their backward pass. Dropout
  // masks from (seed, offset) as forward_backward's: give each micro-batch its own offset.
  //
  // The stage's output for d_in [n, input_size()] (device memory, kept until the backward pass):
  // rows of device memory [n, output_size()], valid until the next forward of the same rows.
  Result<const float*> stage_forward(const float* d_in, int64_t row0, int64_t n, bool train, uint64_t dropout_seed,
                                     uint64_t dropout_offset);
  // The last stage, after stage_forward() of these rows: their loss and correct count into the
  // stats; with `train`, the loss's gradient times grad_scale into stage_delta(); the
  // probabilities into d_probs [n, classes] (device) when not null.
  Status stage_loss(const int32_t* d_labels, int64_t row0, int64_t n, bool train, float grad_scale, float* d_probs);
  // Device memory for the gradient of the stage's output, [n, output_size()]: a stage before the
  // last receives its next stage's input gradient here before stage_backward().
  float* stage_delta() const noexcept;
  // The backward pass of rows [row0, row0 + n) from stage_delta(), d_in the input their forward
  // took: the parameters' gradients added into d_grads(). Returns the gradient of the input
  // [n, input_size()] (device memory, valid until the next call), nullptr on the first stage.
  Result<const float*> stage_backward(const float* d_in, int64_t row0, int64_t n, uint64_t dropout_seed,
                                      uint64_t dropout_offset);
  Status zero_grads();
  int64_t input_size() const noexcept;
  int64_t output_size() const noexcept;

 private:
  struct Impl;
  explicit GpuNetwork(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A contiguous range of the parameter vector, as nn::ParamBlock.
struct GpuParamBlock {
  size_t offset = 0, size = 0;
  bool decay = false, frozen = false;
  float lr_scale = 1.0f;
};

struct GpuOptimizerOptions {
  enum class Kind { kSgd, kAdam, kAdamW } kind = Kind::kSgd;
  double momentum = 0.0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
};

// nn::Optimizer's update (nn/optimizer.h, PyTorch 1.13's definitions) on device vectors, block by
// block: frozen blocks skipped, decay on decaying blocks only, lr * lr_scale, parameters outside
// every block updated without decay; one step count for the whole vector. Its state is
// nn::OptimizerState's: the step count and the buffers (sgd: {velocity}, empty without momentum;
// adam/adamw: {m, v}), so that checkpoints carry it across backends.
class GpuOptimizer {
 public:
  static Result<GpuOptimizer> create(const GpuContext& ctx, size_t num_params, const GpuOptimizerOptions& options);
  Status step(float* d_params, const float* d_grads, const std::vector<GpuParamBlock>& blocks, float lr);
  int64_t steps() const noexcept { return steps_; }
  // Downloads / uploads the buffers; kInvalidArgument when the sizes do not fit.
  Result<std::vector<std::vector<float>>> buffers() const;
  Status set_state(int64_t steps, const std::vector<std::vector<float>>& buffers);

 private:
  GpuOptimizer() = default;
  const GpuContext* ctx_ = nullptr;
  size_t num_params_ = 0;
  GpuOptimizerOptions options_;
  int64_t steps_ = 0;
  std::vector<DeviceBuffer> buffers_;
};

// A data set on the device: images [rows, features] fp32 and labels [rows] int32, and a gather of
// a batch's rows by index into device batch buffers (one kernel), so that no image crosses PCIe
// per step.
class GpuDataset {
 public:
  static Result<GpuDataset> create(const GpuContext& ctx, std::span<const float> images, std::span<const int32_t> labels,
                                   int64_t features, int64_t max_batch);
  // Copies rows[0..n) (host indices, n <= max_batch) of the set into batch_x() / batch_labels().
  Status gather(std::span<const int64_t> rows);
  const float* batch_x() const noexcept { return batch_x_.as<const float>(); }
  const int32_t* batch_labels() const noexcept { return batch_y_.as<const int32_t>(); }
  int64_t rows() const noexcept { return rows_; }

 private:
  GpuDataset() = default;
  const GpuContext* ctx_ = nullptr;
  int64_t rows_ = 0, features_ = 0, max_batch_ = 0;
  DeviceBuffer images_, labels_, index_, batch_x_, batch_y_;
};

}  // namespace hpctune::gpu
