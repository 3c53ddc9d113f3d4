// GpuMlp (gpu_mlp.h): the dense network's training step as calls into the CUDA library.
#include "gpu/gpu_mlp.h"

#include <algorithm>
#include <utility>

namespace hpctune::gpu {

size_t GpuMlp::num_params(const std::vector<int64_t>& sizes) noexcept {
  size_t n = 0;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) n += size_t(sizes[l] * sizes[l + 1] + sizes[l + 1]);
  return n;
}

Result<GpuMlp> GpuMlp::create(const GpuContext& ctx, std::vector<int64_t> sizes, int64_t max_batch,
                              std::span<const float> params, GpuSgdOptions sgd) {
  if (sizes.size() < 2) return err(Errc::kInvalidArgument, "GpuMlp: needs the input size and the classes at least");
  for (int64_t s : sizes)
    if (s < 1 || s > (int64_t(1) << 24)) return err(Errc::kInvalidArgument, "GpuMlp: a layer size out of [1, 2^24]");
  if (max_batch < 1 || max_batch > (int64_t(1) << 20))
    return err(Errc::kInvalidArgument, "GpuMlp: max_batch out of [1, 2^20]");
  if (params.size() != num_params(sizes))
    return err(Errc::kInvalidArgument, "GpuMlp: " + std::to_string(params.size()) + " parameters given, the layers have " +
                                           std::to_string(num_params(sizes)));
  GpuMlp m;
  m.ctx_ = &ctx;
  m.sizes_ = std::move(sizes);
  m.max_batch_ = max_batch;
  m.sgd_ = sgd;
  HPCTUNE_ASSIGN(m.params_, ctx.upload(params));
  HPCTUNE_ASSIGN(m.grads_, ctx.allocate(params.size_bytes()));
  HPCTUNE_TRY(m.grads_.fill_zero());
  if (sgd.momentum != 0.0f) {
    HPCTUNE_ASSIGN(m.velocity_, ctx.allocate(params.size_bytes()));
    HPCTUNE_TRY(m.velocity_.fill_zero());
  }
  int64_t widest = 1;
  for (size_t l = 1; l < m.sizes_.size(); ++l) {
    HPCTUNE_ASSIGN(DeviceBuffer act, ctx.allocate(size_t(max_batch * m.sizes_[l]) * sizeof(float)));
    m.activations_.push_back(std::move(act));
    widest = std::max(widest, m.sizes_[l]);
  }
  HPCTUNE_ASSIGN(m.dact_a_, ctx.allocate(size_t(max_batch * widest) * sizeof(float)));
  HPCTUNE_ASSIGN(m.dact_b_, ctx.allocate(size_t(max_batch * widest) * sizeof(float)));
  HPCTUNE_ASSIGN(m.loss_, ctx.allocate(sizeof(float)));
  HPCTUNE_ASSIGN(m.correct_, ctx.allocate(sizeof(int32_t)));
  HPCTUNE_TRY(m.loss_.fill_zero());
  HPCTUNE_TRY(m.correct_.fill_zero());
  return m;
}

Status GpuMlp::train_step(const float* d_x, const int32_t* d_labels, int64_t batch, float lr) {
  if (batch < 1 || batch > max_batch_)
    return err(Errc::kInvalidArgument, "GpuMlp: batch " + std::to_string(batch) + " out of [1, " +
                                           std::to_string(max_batch_) + "]");
  const auto& api = ctx_->api();
  HpctuneGpuContext* c = ctx_->raw();
  const size_t layers = sizes_.size() - 1;
  std::vector<size_t> offset(layers);  // of each layer's W; its b follows
  for (size_t l = 0, o = 0; l < layers; ++l) {
    offset[l] = o;
    o += size_t(sizes_[l] * sizes_[l + 1] + sizes_[l + 1]);
  }
  float* P = params_.as<float>();
  float* G = grads_.as<float>();
  auto input_of = [&](size_t l) { return l == 0 ? d_x : activations_[l - 1].as<float>(); };

  for (size_t l = 0; l < layers; ++l) {
    const int64_t in = sizes_[l], out = sizes_[l + 1];
    float* W = P + offset[l];
    HPCTUNE_TRY(ctx_->check(api.gemm(c, 0, 0, batch, out, in, 1.f, input_of(l), W, 0.f, activations_[l].as<float>()),
                            "gemm (forward)"));
    HPCTUNE_TRY(ctx_->check(api.bias_activation_forward(c, activations_[l].as<float>(), W + in * out, batch, out,
                                                        l + 1 < layers ? 1 : 0),
                            "bias + ReLU"));
  }
  float* dy = dact_a_.as<float>();
  float* other = dact_b_.as<float>();
  HPCTUNE_TRY(ctx_->check(api.softmax_cross_entropy(c, activations_[layers - 1].as<float>(), d_labels, batch,
                                                    sizes_[layers], 1.0f / float(batch), dy, loss_.as<float>(),
                                                    correct_.as<int32_t>()),
                          "softmax cross-entropy"));
  for (size_t l = layers; l-- > 0;) {
    const int64_t in = sizes_[l], out = sizes_[l + 1];
    float* W = P + offset[l];
    float* gW = G + offset[l];
    HPCTUNE_TRY(ctx_->check(api.gemm(c, 1, 0, in, out, batch, 1.f, input_of(l), dy, 0.f, gW), "gemm (weight gradient)"));
    HPCTUNE_TRY(ctx_->check(api.fill_zero(c, gW + in * out, size_t(out) * sizeof(float)), "fill zero"));
    HPCTUNE_TRY(ctx_->check(api.bias_gradient(c, dy, gW + in * out, batch, out), "bias gradient"));
    if (l == 0) break;
    HPCTUNE_TRY(ctx_->check(api.gemm(c, 0, 1, batch, in, out, 1.f, dy, W, 0.f, other), "gemm (input gradient)"));
    HPCTUNE_TRY(ctx_->check(api.relu_backward(c, activations_[l - 1].as<float>(), other, other, batch * in),
                            "ReLU backward"));
    std::swap(dy, other);
  }
  float* V = velocity_.as<float>();
  for (size_t l = 0; l < layers; ++l) {
    const int64_t in = sizes_[l], out = sizes_[l + 1];
    const size_t o = offset[l];
    HPCTUNE_TRY(ctx_->check(api.sgd_update(c, P + o, G + o, V ? V + o : nullptr, in * out, lr, sgd_.momentum,
                                           sgd_.weight_decay, sgd_.nesterov),
                            "SGD (weights)"));
    const size_t ob = o + size_t(in * out);
    HPCTUNE_TRY(ctx_->check(api.sgd_update(c, P + ob, G + ob, V ? V + ob : nullptr, out, lr, sgd_.momentum, 0.f,
                                           sgd_.nesterov),
                            "SGD (biases)"));
  }
  images_ += batch;
  return Status::Ok();
}

Result<GpuStepStats> GpuMlp::take_stats() {
  HPCTUNE_ASSIGN(auto loss, loss_.read<float>());
  HPCTUNE_ASSIGN(auto correct, correct_.read<int32_t>());
  GpuStepStats s{loss[0], correct[0], images_};
  HPCTUNE_TRY(loss_.fill_zero());
  HPCTUNE_TRY(correct_.fill_zero());
  images_ = 0;
  return s;
}

}  // namespace hpctune::gpu
