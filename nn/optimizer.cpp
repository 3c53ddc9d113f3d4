#include "nn/optimizer.h"

#include <cmath>

namespace hpctune::nn {

Result<OptimizerKind> parse_optimizer_kind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  return err(Errc::kInvalidArgument, "unknown optimizer '" + name + "' (known: sgd, adam, adamw)");
}

const char* optimizer_kind_name(OptimizerKind kind) noexcept {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

Optimizer::Optimizer(size_t num_params, OptimizerOptions options) : options_(options), num_params_(num_params) {
  size_t buffers = 0;
  if (options_.kind == OptimizerKind::kSgd) buffers = options_.momentum != 0.0 ? 1 : 0;
  else buffers = 2;
  buffers_.assign(buffers, std::vector<float>(num_params, 0.0f));
}

OptimizerState Optimizer::state() const { return OptimizerState{steps_, buffers_}; }

Status Optimizer::set_state(const OptimizerState& state) {
  if (state.buffers.size() != buffers_.size()) {
    return err(Errc::kInvalidArgument, "optimizer state has " + std::to_string(state.buffers.size()) +
                                           " buffers, " + optimizer_kind_name(options_.kind) + " needs " +
                                           std::to_string(buffers_.size()));
  }
  for (const auto& b : state.buffers) {
    if (b.size() != num_params_) {
      return err(Errc::kInvalidArgument, "optimizer state of " + std::to_string(b.size()) + " values for " +
                                             std::to_string(num_params_) + " parameters");
    }
  }
  if (state.steps < 0) return err(Errc::kInvalidArgument, "optimizer state with a negative step count");
  steps_ = state.steps;
  buffers_ = state.buffers;
  return Status::Ok();
}

void Optimizer::update_range(float* p, const float* g, size_t offset, size_t n, bool decay, float lr, double bc1,
                             double bc2) noexcept {
  const auto& o = options_;
  const float wd = decay ? static_cast<float>(o.weight_decay) : 0.0f;
  if (o.kind == OptimizerKind::kSgd) {
    if (buffers_.empty()) {
      for (size_t i = offset; i < offset + n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      return;
    }
    float* v = buffers_[0].data();
    const float mu = static_cast<float>(o.momentum);
    if (o.nesterov) {
      for (size_t i = offset; i < offset + n; ++i) {
        const float gi = g[i] + wd * p[i];
        v[i] = mu * v[i] + gi;
        p[i] -= lr * (gi + mu * v[i]);
      }
    } else {
      for (size_t i = offset; i < offset + n; ++i) {
        v[i] = mu * v[i] + (g[i] + wd * p[i]);
        p[i] -= lr * v[i];
      }
    }
    return;
  }
  float* m = buffers_[0].data();
  float* v = buffers_[1].data();
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float step_size = static_cast<float>(static_cast<double>(lr) / bc1);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(o.eps);
  const bool decoupled = o.kind == OptimizerKind::kAdamW;
  const float shrink = 1.0f - lr * wd;
  for (size_t i = offset; i < offset + n; ++i) {
    float gi = g[i];
    if (decoupled) p[i] *= shrink;
    else gi += wd * p[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps);
  }
}

void Optimizer::step(std::span<float> params, std::span<const float> grads, const std::vector<ParamBlock>& blocks,
                     float lr) noexcept {
  ++steps_;
  const double t = static_cast<double>(steps_);
  const double bc1 = 1.0 - std::pow(options_.beta1, t);
  const double bc2 = 1.0 - std::pow(options_.beta2, t);
  float* p = params.data();
  const float* g = grads.data();
  const size_t n = std::min({params.size(), grads.size(), num_params_});
  // Walk the blocks in order; gaps between them (none in a Network) update without decay.
  size_t pos = 0;
  for (const auto& b : blocks) {
    if (b.offset >= n) break;
    if (b.offset > pos) update_range(p, g, pos, b.offset - pos, false, lr, bc1, bc2);
    const size_t start = std::max(pos, b.offset);
    const size_t end = std::min(n, b.offset + b.size);
    if (end > start && !b.frozen) update_range(p, g, start, end - start, b.decay, lr * b.lr_scale, bc1, bc2);
    pos = std::max(pos, end);
  }
  if (pos < n) update_range(p, g, pos, n - pos, false, lr, bc1, bc2);
}

}  // namespace hpctune::nn
