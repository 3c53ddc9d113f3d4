// Dense (fully connected) layers: one OpenBLAS SGEMM per batch and per pass direction, with the
// bias add and the activation fused into one pass over the GEMM's output.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/layers.h"

namespace hpctune::nn {

void activation_backward(LayerActivation a, const float* y, const float* dy, float* dz, size_t count) noexcept {
  switch (a) {
    case LayerActivation::kRelu:
      for (size_t i = 0; i < count; ++i) dz[i] = y[i] > 0.0f ? dy[i] : 0.0f;
      break;
    case LayerActivation::kTanh:
      for (size_t i = 0; i < count; ++i) dz[i] = dy[i] * (1.0f - y[i] * y[i]);
      break;
    case LayerActivation::kSigmoid:
      for (size_t i = 0; i < count; ++i) dz[i] = dy[i] * (y[i] * (1.0f - y[i]));
      break;
    case LayerActivation::kNone:
      std::copy(dy, dy + count, dz);
      break;
  }
}

bool parse_layer_activation(const std::string& name, LayerActivation& out) noexcept {
  if (name == "none") return out = LayerActivation::kNone, true;
  if (name == "relu") return out = LayerActivation::kRelu, true;
  if (name == "tanh") return out = LayerActivation::kTanh, true;
  if (name == "sigmoid") return out = LayerActivation::kSigmoid, true;
  return false;
}

const char* layer_activation_name(LayerActivation a) noexcept {
  switch (a) {
    case LayerActivation::kNone: return "none";
    case LayerActivation::kRelu: return "relu";
    case LayerActivation::kTanh: return "tanh";
    case LayerActivation::kSigmoid: return "sigmoid";
  }
  return "?";
}

namespace {

// z += b (per column), then the activation, in place over [rows, cols].
void bias_activation(float* z, const float* b, int64_t rows, int64_t cols, LayerActivation act) noexcept {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = z + i * cols;
    switch (act) {
      case LayerActivation::kNone:
        for (int64_t j = 0; j < cols; ++j) row[j] += b[j];
        break;
      case LayerActivation::kRelu:
        for (int64_t j = 0; j < cols; ++j) row[j] = std::max(row[j] + b[j], 0.0f);
        break;
      case LayerActivation::kTanh:
        for (int64_t j = 0; j < cols; ++j) row[j] = std::tanh(row[j] + b[j]);
        break;
      case LayerActivation::kSigmoid:
        for (int64_t j = 0; j < cols; ++j) row[j] = 1.0f / (1.0f + std::exp(-(row[j] + b[j])));
        break;
    }
  }
}

class DenseLayer final : public Layer {
 public:
  DenseLayer(Shape in, int64_t units, LayerActivation act) : in_(in), units_(units), act_(act) {}

  std::string describe() const override {
    return "dense " + std::to_string(units_) + " " + layer_activation_name(act_);
  }
  Shape input_shape() const override { return in_; }
  Shape output_shape() const override { return {units_, 1, 1}; }
  size_t num_params() const override { return static_cast<size_t>(fan_in() * units_ + units_); }
  std::vector<ParamBlock> param_blocks() const override {
    const size_t w = static_cast<size_t>(fan_in() * units_);
    return {{0, w, true}, {w, static_cast<size_t>(units_), false}};
  }
  std::vector<std::vector<int64_t>> param_shapes() const override { return {{fan_in(), units_}, {units_}}; }

  // He-normal (std sqrt(2 / fan_in)) into ReLU, Glorot-uniform otherwise.
  void init(std::span<float> params, Rng& rng) const override {
    const size_t n = static_cast<size_t>(fan_in() * units_);
    if (act_ == LayerActivation::kRelu) {
      const double sd = std::sqrt(2.0 / static_cast<double>(fan_in()));
      for (size_t k = 0; k < n; ++k) params[k] = static_cast<float>(rng.normal() * sd);
    } else {
      const double a = std::sqrt(6.0 / static_cast<double>(fan_in() + units_));
      for (size_t k = 0; k < n; ++k) params[k] = static_cast<float>(rng.uniform(-a, a));
    }
    std::fill(params.begin() + static_cast<std::ptrdiff_t>(n), params.end(), 0.0f);
  }

  void forward(std::span<const float> params, const float* x, float* y, int64_t batch, bool, Rng*,
               LayerState*) override {
    const int m = static_cast<int>(batch), k = static_cast<int>(fan_in()), n = static_cast<int>(units_);
    const float* w = params.data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, x, k, w, n, 0.0f, y, n);
    bias_activation(y, w + static_cast<size_t>(k) * n, batch, n, act_);
  }

  void backward(std::span<const float> params, std::span<float> grads, const float* x, const float* y,
                const float* dy, float* dx, int64_t batch, LayerState*) override {
    const int m = static_cast<int>(batch), k = static_cast<int>(fan_in()), n = static_cast<int>(units_);
    const size_t count = static_cast<size_t>(batch * units_);
    // dz = dy * act'(z), with act' written in terms of the output y.
    const float* dz = dy;
    if (act_ != LayerActivation::kNone) {
      if (dz_.size() < count) dz_.resize(count);
      activation_backward(act_, y, dy, dz_.data(), count);
      dz = dz_.data();
    }
    float* dw = grads.data();
    float* db = dw + static_cast<size_t>(k) * n;
    // dW += x^T dz  [k, n]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, m, 1.0f, x, k, dz, n, 1.0f, dw, n);
    // db += column sums of dz, rows in order (deterministic).
    for (int64_t i = 0; i < batch; ++i) {
      const float* row = dz + i * n;
      for (int j = 0; j < n; ++j) db[j] += row[j];
    }
    // dx = dz W^T  [batch, k]
    if (dx != nullptr) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, k, n, 1.0f, dz, n, params.data(), n, 0.0f, dx, k);
    }
  }

 private:
  int64_t fan_in() const noexcept { return in_.size(); }

  Shape in_;
  int64_t units_;
  LayerActivation act_;
  std::vector<float> dz_;  // backward scratch, reused across calls
};

}  // namespace

std::unique_ptr<Layer> make_dense_layer(Shape in, int64_t units, LayerActivation activation) {
  return std::make_unique<DenseLayer>(in, units, activation);
}

}  // namespace hpctune::nn
