// Inverted dropout: the mask is drawn in forward() and kept in the pass's state for backward().
#include <algorithm>
#include <cstdio>
#include <vector>

#include "nn/layers.h"

namespace hpctune::nn {
namespace {

// Inverted dropout with the mask kept in the pass's state.
struct DropoutState final : LayerState {
  std::vector<float> mask;  // 0 or 1 / (1 - rate)
};

class DropoutLayer final : public Layer {
 public:
  DropoutLayer(Shape in, double rate) : in_(in), rate_(rate) {}
  std::string describe() const override {
    char buf[32];
    std::snprintf(buf, sizeof buf, "dropout %g", rate_);
    return buf;
  }
  Shape input_shape() const override { return in_; }
  Shape output_shape() const override { return in_; }
  std::unique_ptr<LayerState> make_state() const override { return std::make_unique<DropoutState>(); }

  void forward(std::span<const float>, const float* x, float* y, int64_t batch, bool train, Rng* rng,
               LayerState* state) override {
    const size_t n = static_cast<size_t>(batch * in_.size());
    auto* st = static_cast<DropoutState*>(state);
    if (!train || rate_ <= 0.0) {
      std::copy_n(x, n, y);
      if (st != nullptr) st->mask.clear();  // backward: identity
      return;
    }
    st->mask.resize(n);
    float* mask = st->mask.data();
    const float keep_scale = static_cast<float>(1.0 / (1.0 - rate_));
    // Compare 32 random bits against rate * 2^32: two decisions per 64-bit draw.
    const uint64_t threshold = static_cast<uint64_t>(rate_ * 4294967296.0);
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
      const uint64_t r = rng->next();
      mask[i] = (r & 0xffffffffu) < threshold ? 0.0f : keep_scale;
      mask[i + 1] = (r >> 32) < threshold ? 0.0f : keep_scale;
    }
    if (i < n) mask[i] = (rng->next() & 0xffffffffu) < threshold ? 0.0f : keep_scale;
    for (size_t k = 0; k < n; ++k) y[k] = x[k] * mask[k];
  }

  void backward(std::span<const float>, std::span<float>, const float*, const float*, const float* dy, float* dx,
                int64_t batch, LayerState* state) override {
    if (dx == nullptr) return;
    const size_t n = static_cast<size_t>(batch * in_.size());
    const auto* st = static_cast<const DropoutState*>(state);
    if (st == nullptr || st->mask.empty()) {
      std::copy_n(dy, n, dx);
      return;
    }
    const float* mask = st->mask.data();
    for (size_t k = 0; k < n; ++k) dx[k] = dy[k] * mask[k];
  }

 private:
  Shape in_;
  double rate_;
};

}  // namespace

std::unique_ptr<Layer> make_dropout_layer(Shape in, double rate) { return std::make_unique<DropoutLayer>(in, rate); }

}  // namespace hpctune::nn
