// GpuPackedMlp: k trials of the built-in `mlp` trainer's network (dense layers, ReLU between them,
// softmax cross-entropy on the logits), all of one shape, trained on one GPU as ONE batched model
// (issue 23, packing: `trials_per_gpu: k` in one process). Model i's parameters are nn::Network's
// vector (per layer W [in, out] row-major, then b) and the models lie one after another, so model
// i's slice moves to and from nn::Network, GpuMlp and checkpoints as it is.
//
// One train_step() for all k: per layer one cublasSgemmStridedBatched forward and one fused
// per-model bias(+ReLU) pass; one per-model softmax cross-entropy kernel; per layer backward two
// batched GEMMs, one ReLU-backward pass and one per-model bias gradient; one SGD(momentum) pass
// over every model with per-model learning rates, momenta and weight decays (each model is a trial
// with its own). Each model takes its own batch: d_x [k, batch, inputs], d_labels [k, batch] (the
// trials keep their own data order; GpuPackedDataset gathers them). Numerically each model's step
// is GpuMlp's (same kernels' arithmetic; the batched GEMMs may round differently within fp32).
//
// Precision: fp32, or TF32 when the context has set_tf32 on. Not here: dropout, Adam, bf16.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "gpu/gpu_context.h"

namespace hpctune::gpu {

// One packed model's optimizer settings (SGD as nn::Optimizer; weight decay on the weights only).
struct GpuPackedTrial {
  float lr = 0.05f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
};

// Per model since the last take_stats(): summed loss, correct count, and the images each model saw.
struct GpuPackedStats {
  std::vector<double> loss_sum;
  std::vector<int64_t> correct;
  int64_t count = 0;  // per model (every model sees as many)
};

class GpuPackedMlp {
 public:
  static constexpr int64_t kMaxModels = 4096;

  // `sizes`: inputs, hidden widths, classes ({784, 256, 10}); `trials` one per model (k =
  // trials.size()); `params` k * num_params(sizes) values, model after model. kInvalidArgument
  // (naming what) for k = 0 or > kMaxModels, fewer than two sizes, a size out of [1, 2^24],
  // max_batch out of [1, 2^20], params of another length, a lr or momentum not finite or < 0.
  // The context must outlive the GpuPackedMlp and stay where it is.
  static Result<GpuPackedMlp> create(const GpuContext& ctx, std::vector<int64_t> sizes, int64_t max_batch,
                                     std::span<const float> params, const std::vector<GpuPackedTrial>& trials,
                                     bool nesterov = false);
  static size_t num_params(const std::vector<int64_t>& sizes) noexcept;  // of one model

  int64_t models() const noexcept { return models_; }
  size_t params_per_model() const noexcept { return per_model_; }

  // Forward, loss (each model's gradient scaled by 1 / batch), backward and one SGD update of every
  // model. d_x [models, batch, sizes[0]] and d_labels [models, batch] are device memory, model i's
  // batch at i * batch * sizes[0] and i * batch; 1 <= batch <= max_batch.
  Status train_step(const float* d_x, const int32_t* d_labels, int64_t batch);
  // Inference of every model on ONE batch shared by all (d_x [batch, sizes[0]], d_labels [batch]):
  // adds each model's loss and correct count to the stats; no gradient, no update.
  Status evaluate(const float* d_x, const int32_t* d_labels, int64_t batch);
  // Replaces the learning rates (one per model; a schedule between steps). kInvalidArgument for
  // another count or a value not finite or < 0.
  Status set_learning_rates(std::span<const float> lrs);
  // Per-model loss sums and correct counts since the last call (waits for the queued work).
  Result<GpuPackedStats> take_stats();

  Result<std::vector<float>> params() const { return params_.read<float>(); }  // all models
  Result<std::vector<float>> grads() const { return grads_.read<float>(); }
  // The SGD momentum buffers of every model (zero after create()), laid out as params(); a trial
  // that continues in another pack brings its own (trainers/packed_engine.h). set_velocity():
  // kInvalidArgument for another length.
  Result<std::vector<float>> velocity() const { return velocity_.read<float>(); }
  Status set_velocity(std::span<const float> velocity);

 private:
  GpuPackedMlp() = default;
  Status forward(const float* d_x, int64_t x_stride, int64_t batch);
  const GpuContext* ctx_ = nullptr;
  std::vector<int64_t> sizes_;
  std::vector<size_t> offset_;  // of each layer's W within a model; its b follows
  int64_t models_ = 0, max_batch_ = 0;
  size_t per_model_ = 0;
  bool nesterov_ = false, any_decay_ = false;
  DeviceBuffer params_, grads_, velocity_;
  DeviceBuffer lr_, momentum_, weight_decay_;  // [models] each
  std::vector<DeviceBuffer> activations_;      // per layer: [models, max_batch, sizes[l + 1]]
  DeviceBuffer dact_a_, dact_b_;               // the gradient flowing back, ping-pong
  DeviceBuffer loss_, correct_;                // [models]
  int64_t images_ = 0;
};

// A data set on the device, read by k trials in k orders: images [rows, features] fp32 and labels
// [rows] int32 uploaded once; set_orders() uploads each trial's order (k x order_length row
// indices, checked to lie in the set); gather() copies batch `batch` rows of every trial's order,
// starting at `position`, into batch_x() [k, batch, features] / batch_labels() [k, batch].
class GpuPackedDataset {
 public:
  static Result<GpuPackedDataset> create(const GpuContext& ctx, std::span<const float> images,
                                         std::span<const int32_t> labels, int64_t features, int64_t models,
                                         int64_t max_batch);
  // orders: models x order_length indices in [0, rows()), model after model.
  Status set_orders(std::span<const int32_t> orders, int64_t order_length);
  Status gather(int64_t position, int64_t batch);
  const float* batch_x() const noexcept { return batch_x_.as<const float>(); }
  const int32_t* batch_labels() const noexcept { return batch_y_.as<const int32_t>(); }
  const float* images() const noexcept { return images_.as<const float>(); }  // the whole set
  const int32_t* labels() const noexcept { return labels_.as<const int32_t>(); }
  int64_t rows() const noexcept { return rows_; }
  int64_t features() const noexcept { return features_; }

 private:
  GpuPackedDataset() = default;
  const GpuContext* ctx_ = nullptr;
  int64_t rows_ = 0, features_ = 0, models_ = 0, max_batch_ = 0, order_length_ = 0;
  DeviceBuffer images_, labels_, orders_, batch_x_, batch_y_;
};

}  // namespace hpctune::gpu
