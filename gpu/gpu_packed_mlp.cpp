// GpuPackedMlp and GpuPackedDataset (gpu_packed_mlp.h): k same-shape MLPs' training step as
// batched calls into the CUDA library.
#include "gpu/gpu_packed_mlp.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace hpctune::gpu {

namespace {

Status bad(const std::string& what) { return err(Errc::kInvalidArgument, what); }

Status check_rates(std::span<const float> values, const char* what) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]) || values[i] < 0.0f)
      return bad(std::string("GpuPackedMlp: model ") + std::to_string(i) + "'s " + what + " is " +
                 std::to_string(values[i]) + ", not a finite value >= 0");
  return Status::Ok();
}

}  // namespace

size_t GpuPackedMlp::num_params(const std::vector<int64_t>& sizes) noexcept {
  size_t n = 0;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) n += size_t(sizes[l] * sizes[l + 1] + sizes[l + 1]);
  return n;
}

Result<GpuPackedMlp> GpuPackedMlp::create(const GpuContext& ctx, std::vector<int64_t> sizes, int64_t max_batch,
                                          std::span<const float> params, const std::vector<GpuPackedTrial>& trials,
                                          bool nesterov) {
  const int64_t k = int64_t(trials.size());
  if (k < 1 || k > kMaxModels)
    return err(Errc::kInvalidArgument, "GpuPackedMlp: " + std::to_string(k) + " models; between 1 and " +
                                           std::to_string(kMaxModels) + " are packed");
  if (sizes.size() < 2) return err(Errc::kInvalidArgument, "GpuPackedMlp: needs the input size and the classes at least");
  for (int64_t s : sizes)
    if (s < 1 || s > (int64_t(1) << 24))
      return err(Errc::kInvalidArgument, "GpuPackedMlp: a layer size " + std::to_string(s) + " out of [1, 2^24]");
  if (max_batch < 1 || max_batch > (int64_t(1) << 20))
    return err(Errc::kInvalidArgument, "GpuPackedMlp: max_batch out of [1, 2^20]");
  const size_t per_model = num_params(sizes);
  if (params.size() != per_model * size_t(k))
    return err(Errc::kInvalidArgument, "GpuPackedMlp: " + std::to_string(params.size()) + " parameters given, " +
                                           std::to_string(k) + " models of " + std::to_string(per_model) + " need " +
                                           std::to_string(per_model * size_t(k)));
  std::vector<float> lr, momentum, decay;
  for (const auto& t : trials) {
    lr.push_back(t.lr);
    momentum.push_back(t.momentum);
    decay.push_back(t.weight_decay);
  }
  HPCTUNE_TRY(check_rates(lr, "lr"));
  HPCTUNE_TRY(check_rates(momentum, "momentum"));
  HPCTUNE_TRY(check_rates(decay, "weight_decay"));
  // Every buffer below is bounded by these products; refuse what cannot fit in 64-bit byte counts.
  int64_t widest = 1;
  for (size_t l = 1; l < sizes.size(); ++l) widest = std::max(widest, sizes[l]);
  widest = std::max(widest, sizes[0]);
  if (double(k) * double(max_batch) * double(widest) > double(int64_t(1) << 40) ||
      double(per_model) * double(k) > double(int64_t(1) << 40))
    return err(Errc::kInvalidArgument, "GpuPackedMlp: models x batch x width or models x parameters above 2^40");

  GpuPackedMlp m;
  m.ctx_ = &ctx;
  m.sizes_ = std::move(sizes);
  m.models_ = k;
  m.max_batch_ = max_batch;
  m.per_model_ = per_model;
  m.nesterov_ = nesterov;
  m.any_decay_ = std::any_of(decay.begin(), decay.end(), [](float d) { return d != 0.0f; });
  for (size_t l = 0, o = 0; l + 1 < m.sizes_.size(); ++l) {
    m.offset_.push_back(o);
    o += size_t(m.sizes_[l] * m.sizes_[l + 1] + m.sizes_[l + 1]);
  }
  HPCTUNE_ASSIGN(m.params_, ctx.upload(params));
  HPCTUNE_ASSIGN(m.grads_, ctx.allocate(params.size_bytes()));
  HPCTUNE_TRY(m.grads_.fill_zero());
  HPCTUNE_ASSIGN(m.velocity_, ctx.allocate(params.size_bytes()));
  HPCTUNE_TRY(m.velocity_.fill_zero());
  HPCTUNE_ASSIGN(m.lr_, ctx.upload(std::span<const float>(lr)));
  HPCTUNE_ASSIGN(m.momentum_, ctx.upload(std::span<const float>(momentum)));
  HPCTUNE_ASSIGN(m.weight_decay_, ctx.upload(std::span<const float>(decay)));
  for (size_t l = 1; l < m.sizes_.size(); ++l) {
    HPCTUNE_ASSIGN(DeviceBuffer act, ctx.allocate(size_t(k * max_batch * m.sizes_[l]) * sizeof(float)));
    m.activations_.push_back(std::move(act));
  }
  HPCTUNE_ASSIGN(m.dact_a_, ctx.allocate(size_t(k * max_batch * widest) * sizeof(float)));
  HPCTUNE_ASSIGN(m.dact_b_, ctx.allocate(size_t(k * max_batch * widest) * sizeof(float)));
  HPCTUNE_ASSIGN(m.loss_, ctx.allocate(size_t(k) * sizeof(float)));
  HPCTUNE_ASSIGN(m.correct_, ctx.allocate(size_t(k) * sizeof(int32_t)));
  HPCTUNE_TRY(m.loss_.fill_zero());
  HPCTUNE_TRY(m.correct_.fill_zero());
  return m;
}

Status GpuPackedMlp::set_learning_rates(std::span<const float> lrs) {
  if (int64_t(lrs.size()) != models_)
    return bad("GpuPackedMlp: " + std::to_string(lrs.size()) + " learning rates for " + std::to_string(models_) +
               " models");
  HPCTUNE_TRY(check_rates(lrs, "lr"));
  return lr_.write(lrs.data(), lrs.size_bytes());
}

Status GpuPackedMlp::set_velocity(std::span<const float> velocity) {
  if (velocity.size() != per_model_ * size_t(models_))
    return bad("GpuPackedMlp: " + std::to_string(velocity.size()) + " momentum values for " +
               std::to_string(models_) + " models of " + std::to_string(per_model_) + " parameters");
  return velocity_.write(velocity.data(), velocity.size_bytes());
}

// Every layer's output for all models; x_stride 0 shares one input batch between the models.
Status GpuPackedMlp::forward(const float* d_x, int64_t x_stride, int64_t batch) {
  const auto& api = ctx_->api();
  HpctuneGpuContext* c = ctx_->raw();
  const size_t layers = sizes_.size() - 1;
  const int64_t np = int64_t(per_model_);
  float* P = params_.as<float>();
  for (size_t l = 0; l < layers; ++l) {
    const int64_t in = sizes_[l], out = sizes_[l + 1];
    const float* x = l == 0 ? d_x : activations_[l - 1].as<float>();
    const int64_t stride_x = l == 0 ? x_stride : batch * in;
    float* y = activations_[l].as<float>();
    float* W = P + offset_[l];
    HPCTUNE_TRY(ctx_->check(
        api.gemm_strided_batched(c, 0, 0, batch, out, in, 1.f, x, stride_x, W, np, 0.f, y, batch * out, models_),
        "batched gemm (forward)"));
    HPCTUNE_TRY(ctx_->check(
        api.packed_bias_activation_forward(c, y, W + in * out, np, models_, batch, out, l + 1 < layers ? 1 : 0),
        "packed bias + ReLU"));
  }
  return Status::Ok();
}

Status GpuPackedMlp::train_step(const float* d_x, const int32_t* d_labels, int64_t batch) {
  if (batch < 1 || batch > max_batch_)
    return bad("GpuPackedMlp: batch " + std::to_string(batch) + " out of [1, " + std::to_string(max_batch_) + "]");
  if (d_x == nullptr || d_labels == nullptr) return bad("GpuPackedMlp: no batch (null device pointer)");
  const auto& api = ctx_->api();
  HpctuneGpuContext* c = ctx_->raw();
  const size_t layers = sizes_.size() - 1;
  const int64_t np = int64_t(per_model_);
  float* P = params_.as<float>();
  float* G = grads_.as<float>();
  HPCTUNE_TRY(forward(d_x, batch * sizes_[0], batch));

  float* dy = dact_a_.as<float>();
  float* other = dact_b_.as<float>();
  const int64_t classes = sizes_[layers];
  HPCTUNE_TRY(ctx_->check(api.packed_softmax_cross_entropy(c, activations_[layers - 1].as<float>(), d_labels, batch,
                                                           models_, batch, classes, 1.0f / float(batch), dy,
                                                           loss_.as<float>(), correct_.as<int32_t>()),
                          "packed softmax cross-entropy"));
  for (size_t l = layers; l-- > 0;) {
    const int64_t in = sizes_[l], out = sizes_[l + 1];
    const float* x = l == 0 ? d_x : activations_[l - 1].as<float>();
    float* W = P + offset_[l];
    float* gW = G + offset_[l];
    HPCTUNE_TRY(ctx_->check(
        api.gemm_strided_batched(c, 1, 0, in, out, batch, 1.f, x, batch * in, dy, batch * out, 0.f, gW, np, models_),
        "batched gemm (weight gradient)"));
    HPCTUNE_TRY(ctx_->check(api.packed_bias_gradient(c, dy, gW + in * out, np, models_, batch, out),
                            "packed bias gradient"));
    if (l == 0) break;
    HPCTUNE_TRY(ctx_->check(
        api.gemm_strided_batched(c, 0, 1, batch, in, out, 1.f, dy, batch * out, W, np, 0.f, other, batch * in, models_),
        "batched gemm (input gradient)"));
    HPCTUNE_TRY(ctx_->check(api.relu_backward(c, activations_[l - 1].as<float>(), other, other, models_ * batch * in),
                            "ReLU backward"));
    std::swap(dy, other);
  }
  float* V = velocity_.as<float>();
  const float* lr = lr_.as<float>();
  const float* mom = momentum_.as<float>();
  if (!any_decay_) {  // one pass over every model's whole vector
    HPCTUNE_TRY(ctx_->check(api.packed_sgd_update(c, P, G, V, np, np, models_, lr, mom, nullptr, nesterov_),
                            "packed SGD"));
  } else {  // decay on the weights only, as nn::Optimizer's decaying blocks
    for (size_t l = 0; l < layers; ++l) {
      const int64_t in = sizes_[l], out = sizes_[l + 1];
      const size_t o = offset_[l], ob = o + size_t(in * out);
      HPCTUNE_TRY(ctx_->check(api.packed_sgd_update(c, P + o, G + o, V + o, np, in * out, models_, lr, mom,
                                                    weight_decay_.as<float>(), nesterov_),
                              "packed SGD (weights)"));
      HPCTUNE_TRY(ctx_->check(api.packed_sgd_update(c, P + ob, G + ob, V + ob, np, out, models_, lr, mom, nullptr,
                                                    nesterov_),
                              "packed SGD (biases)"));
    }
  }
  images_ += batch;
  return Status::Ok();
}

Status GpuPackedMlp::evaluate(const float* d_x, const int32_t* d_labels, int64_t batch) {
  if (batch < 1 || batch > max_batch_)
    return bad("GpuPackedMlp: batch " + std::to_string(batch) + " out of [1, " + std::to_string(max_batch_) + "]");
  if (d_x == nullptr || d_labels == nullptr) return bad("GpuPackedMlp: no batch (null device pointer)");
  HPCTUNE_TRY(forward(d_x, 0, batch));
  const size_t layers = sizes_.size() - 1;
  HPCTUNE_TRY(ctx_->check(ctx_->api().packed_softmax_cross_entropy(ctx_->raw(), activations_[layers - 1].as<float>(),
                                                                    d_labels, 0, models_, batch, sizes_[layers], 1.0f,
                                                                    nullptr, loss_.as<float>(), correct_.as<int32_t>()),
                          "packed softmax cross-entropy (evaluate)"));
  images_ += batch;
  return Status::Ok();
}

Result<GpuPackedStats> GpuPackedMlp::take_stats() {
  HPCTUNE_ASSIGN(auto loss, loss_.read<float>());
  HPCTUNE_ASSIGN(auto correct, correct_.read<int32_t>());
  GpuPackedStats s;
  s.loss_sum.assign(loss.begin(), loss.end());
  s.correct.assign(correct.begin(), correct.end());
  s.count = images_;
  HPCTUNE_TRY(loss_.fill_zero());
  HPCTUNE_TRY(correct_.fill_zero());
  images_ = 0;
  return s;
}

// ---- GpuPackedDataset ----------------------------------------------------------------------------

Result<GpuPackedDataset> GpuPackedDataset::create(const GpuContext& ctx, std::span<const float> images,
                                                  std::span<const int32_t> labels, int64_t features, int64_t models,
                                                  int64_t max_batch) {
  if (features < 1 || features > (int64_t(1) << 24))
    return err(Errc::kInvalidArgument, "GpuPackedDataset: features out of [1, 2^24]");
  if (models < 1 || models > GpuPackedMlp::kMaxModels)
    return err(Errc::kInvalidArgument, "GpuPackedDataset: models out of [1, " +
                                           std::to_string(GpuPackedMlp::kMaxModels) + "]");
  if (max_batch < 1 || max_batch > (int64_t(1) << 20))
    return err(Errc::kInvalidArgument, "GpuPackedDataset: max_batch out of [1, 2^20]");
  if (labels.empty() || labels.size() > size_t(INT32_MAX) || images.size() != labels.size() * size_t(features))
    return err(Errc::kInvalidArgument, "GpuPackedDataset: " + std::to_string(images.size()) + " pixels for " +
                                           std::to_string(labels.size()) + " labels of " + std::to_string(features) +
                                           " features");
  GpuPackedDataset d;
  d.ctx_ = &ctx;
  d.rows_ = int64_t(labels.size());
  d.features_ = features;
  d.models_ = models;
  d.max_batch_ = max_batch;
  HPCTUNE_ASSIGN(d.images_, ctx.upload(images));
  HPCTUNE_ASSIGN(d.labels_, ctx.upload(labels));
  HPCTUNE_ASSIGN(d.batch_x_, ctx.allocate(size_t(models * max_batch * features) * sizeof(float)));
  HPCTUNE_ASSIGN(d.batch_y_, ctx.allocate(size_t(models * max_batch) * sizeof(int32_t)));
  return d;
}

Status GpuPackedDataset::set_orders(std::span<const int32_t> orders, int64_t order_length) {
  if (order_length < 1 || orders.size() != size_t(models_ * order_length))
    return bad("GpuPackedDataset: " + std::to_string(orders.size()) + " indices for " + std::to_string(models_) +
               " orders of " + std::to_string(order_length));
  for (size_t i = 0; i < orders.size(); ++i)
    if (orders[i] < 0 || orders[i] >= rows_)
      return bad("GpuPackedDataset: index " + std::to_string(orders[i]) + " at " + std::to_string(i) +
                 " outside the set's " + std::to_string(rows_) + " rows");
  if (order_length != order_length_) {
    orders_ = DeviceBuffer();
    HPCTUNE_ASSIGN(orders_, ctx_->allocate(orders.size_bytes()));
    order_length_ = order_length;
  }
  return orders_.write(orders.data(), orders.size_bytes());
}

Status GpuPackedDataset::gather(int64_t position, int64_t batch) {
  if (order_length_ == 0) return bad("GpuPackedDataset: gather before set_orders");
  if (batch < 1 || batch > max_batch_ || position < 0 || position + batch > order_length_)
    return bad("GpuPackedDataset: rows [" + std::to_string(position) + ", " + std::to_string(position + batch) +
               ") of orders of " + std::to_string(order_length_) + " (max batch " + std::to_string(max_batch_) + ")");
  return ctx_->check(ctx_->api().packed_gather(ctx_->raw(), images_.as<const float>(), labels_.as<const int32_t>(),
                                               rows_, features_, orders_.as<const int32_t>() + position, order_length_,
                                               models_, batch, batch_x_.as<float>(), batch_y_.as<int32_t>()),
                     "packed gather");
}

}  // namespace hpctune::gpu
