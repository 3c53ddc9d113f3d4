// GpuMlp: the built-in `mlp` trainer's network (dense layers, ReLU between them, softmax
// cross-entropy on the logits) and its SGD step, on one GPU through the CUDA library. Parameters
// and gradients are one contiguous vector each in nn::Network's layout (per layer W [in, out]
// row-major, then b), so they move to and from nn::Network and its checkpoints as they are.
//
// One train_step(): per layer a cuBLAS GEMM and one fused bias(+ReLU) pass; softmax cross-entropy
// with its gradient in one kernel; per layer backward two GEMMs, a ReLU-backward pass and the bias
// gradient; then one SGD pass over the whole vector. Inputs and labels are device memory (the data
// set lives on the device). Loss and correct count accumulate on the device until take_stats().
//
// The trainers use GpuNetwork (gpu_network.h: every layer kind, dropout, Adam/AdamW, bf16); GpuMlp stays
// as the reference the packed models are tested against (test_gpu_packed) and as the smallest
// example of the table.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_network.h"  // GpuStepStats

namespace hpctune::gpu {

struct GpuSgdOptions {
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;  // on the weights only, as nn::Optimizer's decaying blocks
};

class GpuMlp {
 public:
  // `sizes`: inputs, the hidden widths, classes ({784, 256, 256, 10}); `params` in nn::Network's
  // layout (num_params(sizes) values). kInvalidArgument for fewer than two sizes, a size < 1, or
  // params of another length. The context must outlive the GpuMlp and stay where it is.
  static Result<GpuMlp> create(const GpuContext& ctx, std::vector<int64_t> sizes, int64_t max_batch,
                               std::span<const float> params, GpuSgdOptions sgd);
  static size_t num_params(const std::vector<int64_t>& sizes) noexcept;

  // Forward, loss (gradient scaled by 1 / batch: the mean loss), backward and one SGD update at
  // `lr`. d_x [batch, sizes[0]] and d_labels [batch] are device memory; batch <= max_batch.
  Status train_step(const float* d_x, const int32_t* d_labels, int64_t batch, float lr);
  // The loss sum, correct count and images since the last call (waits for the queued steps).
  Result<GpuStepStats> take_stats();

  Result<std::vector<float>> params() const { return params_.read<float>(); }
  Result<std::vector<float>> grads() const { return grads_.read<float>(); }

 private:
  GpuMlp() = default;
  const GpuContext* ctx_ = nullptr;
  std::vector<int64_t> sizes_;
  int64_t max_batch_ = 0;
  GpuSgdOptions sgd_;
  DeviceBuffer params_, grads_, velocity_;  // velocity_ is empty without momentum
  std::vector<DeviceBuffer> activations_;  // per layer: its output [max_batch, sizes[i + 1]]
  DeviceBuffer dact_a_, dact_b_;           // the gradient flowing back, ping-pong
  DeviceBuffer loss_, correct_;
  int64_t images_ = 0;
};

}  // namespace hpctune::gpu
