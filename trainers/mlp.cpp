#include "trainers/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <utility>

// OpenBLAS entry points, declared here rather than through a cblas.h flavour. The dynamic-arch
// ones exist only in DYNAMIC_ARCH builds, hence weak: blas_select_kernels() checks for them.
extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace hpctune::trainers {

Result<Activation> parse_activation(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "tanh") return Activation::kTanh;
  if (name == "sigmoid") return Activation::kSigmoid;
  return err(Errc::kInvalidArgument, "unknown activation '" + name + "' (known: relu, tanh, sigmoid)");
}

const char* activation_name(Activation activation) noexcept {
  switch (activation) {
    case Activation::kRelu: return "relu";
    case Activation::kTanh: return "tanh";
    case Activation::kSigmoid: return "sigmoid";
  }
  return "?";
}

namespace {

// Z += b, then the activation, in place over [rows, cols].
void bias_activation(float* z, const float* b, int64_t rows, int64_t cols, Activation act) noexcept {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = z + i * cols;
    switch (act) {
      case Activation::kRelu:
        for (int64_t j = 0; j < cols; ++j) row[j] = std::max(row[j] + b[j], 0.0f);
        break;
      case Activation::kTanh:
        for (int64_t j = 0; j < cols; ++j) row[j] = std::tanh(row[j] + b[j]);
        break;
      case Activation::kSigmoid:
        for (int64_t j = 0; j < cols; ++j) row[j] = 1.0f / (1.0f + std::exp(-(row[j] + b[j])));
        break;
    }
  }
}

void add_bias(float* z, const float* b, int64_t rows, int64_t cols) noexcept {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = z + i * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] += b[j];
  }
}

// Inverted dropout: mask = 0 with probability p, else 1/(1-p); out = in * mask.
void dropout_forward(const float* in, float* mask, float* out, int64_t n, float p, Rng& rng) noexcept {
  const float keep_scale = 1.0f / (1.0f - p);
  // Compare 32 random bits against p * 2^32: two decisions per 64-bit draw.
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
  int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    const uint64_t r = rng.next();
    mask[i] = (r & 0xffffffffu) < threshold ? 0.0f : keep_scale;
    mask[i + 1] = (r >> 32) < threshold ? 0.0f : keep_scale;
  }
  if (i < n) mask[i] = (rng.next() & 0xffffffffu) < threshold ? 0.0f : keep_scale;
  for (int64_t k = 0; k < n; ++k) out[k] = in[k] * mask[k];
}

// delta *= (mask) * act'(a), where a is the activation's output.
void activation_backward(float* delta, const float* a, const float* mask, int64_t n, Activation act) noexcept {
  switch (act) {
    case Activation::kRelu:
      if (mask != nullptr) {
        for (int64_t k = 0; k < n; ++k) delta[k] = a[k] > 0.0f ? delta[k] * mask[k] : 0.0f;
      } else {
        for (int64_t k = 0; k < n; ++k) delta[k] = a[k] > 0.0f ? delta[k] : 0.0f;
      }
      break;
    case Activation::kTanh:
      if (mask != nullptr) {
        for (int64_t k = 0; k < n; ++k) delta[k] *= mask[k] * (1.0f - a[k] * a[k]);
      } else {
        for (int64_t k = 0; k < n; ++k) delta[k] *= 1.0f - a[k] * a[k];
      }
      break;
    case Activation::kSigmoid:
      if (mask != nullptr) {
        for (int64_t k = 0; k < n; ++k) delta[k] *= mask[k] * (a[k] * (1.0f - a[k]));
      } else {
        for (int64_t k = 0; k < n; ++k) delta[k] *= a[k] * (1.0f - a[k]);
      }
      break;
  }
}

}  // namespace

Mlp::Mlp(MlpShape shape) : shape_(std::move(shape)) {
  size_t offset = 0;
  for (int64_t l = 0; l < layers(); ++l) {
    const size_t w = static_cast<size_t>(fan_in(l) * width(l));
    w_offset_.push_back(offset);
    blocks_.push_back({offset, w, true});
    offset += w;
    b_offset_.push_back(offset);
    blocks_.push_back({offset, static_cast<size_t>(width(l)), false});
    offset += static_cast<size_t>(width(l));
  }
  params_.assign(offset, 0.0f);
  grads_.assign(offset, 0.0f);
  act_.resize(shape_.hidden.size());
  mask_.resize(shape_.hidden.size());
  drop_.resize(shape_.hidden.size());
}

Result<Mlp> Mlp::create(MlpShape shape) {
  constexpr int64_t kMaxDim = INT_MAX / 4;
  if (shape.inputs < 1 || shape.inputs > kMaxDim) {
    return err(Errc::kInvalidArgument, "mlp: inputs must be in [1, " + std::to_string(kMaxDim) + "], got " + std::to_string(shape.inputs));
  }
  if (shape.outputs < 1 || shape.outputs > kMaxDim) {
    return err(Errc::kInvalidArgument, "mlp: outputs must be in [1, " + std::to_string(kMaxDim) + "], got " + std::to_string(shape.outputs));
  }
  for (size_t i = 0; i < shape.hidden.size(); ++i) {
    if (shape.hidden[i] < 1 || shape.hidden[i] > kMaxDim) {
      return err(Errc::kInvalidArgument, "mlp: hidden layer " + std::to_string(i + 1) + " has size " +
                                             std::to_string(shape.hidden[i]) + "; sizes must be >= 1");
    }
  }
  if (!(shape.dropout >= 0.0f && shape.dropout < 1.0f)) {
    return err(Errc::kInvalidArgument, "mlp: dropout must be in [0, 1), got " + std::to_string(shape.dropout));
  }
  int64_t prev = shape.inputs;
  for (int64_t h : shape.hidden) {
    if (prev * h > (int64_t{1} << 32)) return err(Errc::kInvalidArgument, "mlp: a weight matrix is too large");
    prev = h;
  }
  return Mlp(std::move(shape));
}

int64_t Mlp::width(int64_t l) const noexcept {
  return l + 1 < layers() ? shape_.hidden[static_cast<size_t>(l)] : shape_.outputs;
}

void Mlp::init(Rng& rng) {
  for (int64_t l = 0; l < layers(); ++l) {
    const int64_t in = fan_in(l), out = width(l);
    float* w = params_.data() + w_offset_[static_cast<size_t>(l)];
    const bool into_relu = l + 1 < layers() && shape_.activation == Activation::kRelu;
    const size_t n = static_cast<size_t>(in * out);
    if (into_relu) {
      const double std = std::sqrt(2.0 / static_cast<double>(in));
      for (size_t k = 0; k < n; ++k) w[k] = static_cast<float>(rng.normal() * std);
    } else {
      const double a = std::sqrt(6.0 / static_cast<double>(in + out));
      for (size_t k = 0; k < n; ++k) w[k] = static_cast<float>(rng.uniform(-a, a));
    }
    std::fill_n(params_.data() + b_offset_[static_cast<size_t>(l)], out, 0.0f);
  }
}

void Mlp::ensure_capacity(int64_t batch) {
  if (batch <= capacity_) return;
  int64_t widest = shape_.outputs;
  for (size_t i = 0; i < shape_.hidden.size(); ++i) {
    const size_t n = static_cast<size_t>(batch * shape_.hidden[i]);
    act_[i].resize(n);
    if (shape_.dropout > 0.0f) {
      mask_[i].resize(n);
      drop_[i].resize(n);
    }
    widest = std::max(widest, shape_.hidden[i]);
  }
  logits_.resize(static_cast<size_t>(batch * shape_.outputs));
  delta_a_.resize(static_cast<size_t>(batch * widest));
  delta_b_.resize(static_cast<size_t>(batch * widest));
  capacity_ = batch;
}

const float* Mlp::layer_input(const float* x, int64_t l, bool train) const noexcept {
  if (l == 0) return x;
  const size_t h = static_cast<size_t>(l - 1);
  return train && shape_.dropout > 0.0f ? drop_[h].data() : act_[h].data();
}

float* Mlp::run_forward(const float* x, int64_t batch, bool train, Rng* dropout_rng) {
  ensure_capacity(batch);
  const int m = static_cast<int>(batch);
  for (int64_t l = 0; l < layers(); ++l) {
    const int k = static_cast<int>(fan_in(l));
    const int n = static_cast<int>(width(l));
    const bool hidden = l + 1 < layers();
    float* out = hidden ? act_[static_cast<size_t>(l)].data() : logits_.data();
    const float* w = params_.data() + w_offset_[static_cast<size_t>(l)];
    const float* b = params_.data() + b_offset_[static_cast<size_t>(l)];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, layer_input(x, l, train), k, w, n, 0.0f, out, n);
    if (hidden) {
      bias_activation(out, b, batch, n, shape_.activation);
      if (train && shape_.dropout > 0.0f) {
        const size_t h = static_cast<size_t>(l);
        dropout_forward(out, mask_[h].data(), drop_[h].data(), batch * n, shape_.dropout, *dropout_rng);
      }
    } else {
      add_bias(out, b, batch, n);
    }
  }
  return logits_.data();
}

const float* Mlp::forward(const float* x, int64_t batch) { return run_forward(x, batch, false, nullptr); }

BatchStats Mlp::evaluate(const float* x, const int32_t* labels, int64_t batch) {
  const float* logits = run_forward(x, batch, false, nullptr);
  return softmax_cross_entropy(logits, labels, batch, shape_.outputs, 0.0f, nullptr, nullptr);
}

BatchStats Mlp::forward_backward(const float* x, const int32_t* labels, int64_t batch, float grad_scale, Rng& dropout_rng) {
  const float* logits = run_forward(x, batch, true, &dropout_rng);
  float* delta = delta_a_.data();
  float* next = delta_b_.data();
  const BatchStats stats = softmax_cross_entropy(logits, labels, batch, shape_.outputs, grad_scale, delta, nullptr);
  const int m = static_cast<int>(batch);
  for (int64_t l = layers() - 1; l >= 0; --l) {
    const int k = static_cast<int>(fan_in(l));
    const int n = static_cast<int>(width(l));
    const float* in = layer_input(x, l, true);
    float* dw = grads_.data() + w_offset_[static_cast<size_t>(l)];
    float* db = grads_.data() + b_offset_[static_cast<size_t>(l)];
    // dW = in^T delta  [k, n]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, m, 1.0f, in, k, delta, n, 0.0f, dw, n);
    // db = column sums of delta
    std::fill_n(db, n, 0.0f);
    for (int64_t i = 0; i < batch; ++i) {
      const float* row = delta + i * n;
      for (int j = 0; j < n; ++j) db[j] += row[j];
    }
    if (l == 0) break;
    // delta_in = delta W^T  [batch, k], then through dropout and the activation of layer l-1.
    const float* w = params_.data() + w_offset_[static_cast<size_t>(l)];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, k, n, 1.0f, delta, n, w, n, 0.0f, next, k);
    const size_t h = static_cast<size_t>(l - 1);
    activation_backward(next, act_[h].data(), shape_.dropout > 0.0f ? mask_[h].data() : nullptr, batch * k, shape_.activation);
    std::swap(delta, next);
  }
  return stats;
}

void SgdMomentum::step(std::span<float> params, std::span<const float> grads, const std::vector<ParamBlock>& blocks,
                       float lr) noexcept {
  const float mu = static_cast<float>(options_.momentum);
  float* v = velocity_.data();
  float* p = params.data();
  const float* g = grads.data();
  for (const ParamBlock& block : blocks) {
    const float wd = block.decay ? static_cast<float>(options_.weight_decay) : 0.0f;
    const size_t end = block.offset + block.size;
    if (options_.nesterov) {
      for (size_t i = block.offset; i < end; ++i) {
        const float gi = g[i] + wd * p[i];
        v[i] = mu * v[i] + gi;
        p[i] -= lr * (gi + mu * v[i]);
      }
    } else {
      for (size_t i = block.offset; i < end; ++i) {
        v[i] = mu * v[i] + (g[i] + wd * p[i]);
        p[i] -= lr * v[i];
      }
    }
  }
}

void blas_set_threads(int threads) noexcept { openblas_set_num_threads(std::max(1, threads)); }

std::string blas_core_name() {
  const char* name = openblas_get_corename != nullptr ? openblas_get_corename() : nullptr;
  return name != nullptr ? name : "unknown";
}

void blas_select_kernels() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_get_corename == nullptr || gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return;
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user chose; OpenBLAS honoured it at load
    const char* core = openblas_get_corename();
    if (core == nullptr || std::string(core) != "Prescott") return;  // recognised, or really that old
    const char* target = nullptr;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd")) {
      target = "SkylakeX";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      target = "Haswell";
    }
    if (target == nullptr) return;
    // OpenBLAS reads OPENBLAS_CORETYPE only inside gotoblas_dynamic_init(); set it for that call
    // alone so that child processes keep the environment they were given.
    setenv("OPENBLAS_CORETYPE", target, 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
  });
}

}  // namespace hpctune::trainers
