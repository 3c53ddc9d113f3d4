// GpuNetwork, GpuOptimizer and GpuDataset (gpu_network.h): nn::Network's layers, nn::Optimizer's
// update and a device-resident data set, as calls into the CUDA library's table.
#include "gpu/gpu_network.h"

#include <algorithm>
#include <utility>

namespace hpctune::gpu {

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 24;          // a channel count, height, width or unit count
constexpr int64_t kMaxSample = int64_t(1) << 28;       // values of one sample's activation
constexpr int64_t kMaxBatchValues = (int64_t(1) << 31) - 1;  // max_batch x a layer's values (int-indexed libraries)
constexpr int64_t kMaxBatch = int64_t(1) << 20;
constexpr size_t kMaxLayers = 1024;  // also the stride of dropout offsets between dropout layers

const char* kind_name(GpuLayerDesc::Kind k) {
  switch (k) {
    case GpuLayerDesc::Kind::kDense: return "dense";
    case GpuLayerDesc::Kind::kConv: return "conv";
    case GpuLayerDesc::Kind::kMaxpool: return "maxpool";
    case GpuLayerDesc::Kind::kDropout: return "dropout";
  }
  return "?";
}

int32_t act_code(GpuActivation a) {
  switch (a) {
    case GpuActivation::kNone: return HPCTUNE_ACT_NONE;
    case GpuActivation::kRelu: return HPCTUNE_ACT_RELU;
    case GpuActivation::kTanh: return HPCTUNE_ACT_TANH;
    case GpuActivation::kSigmoid: return HPCTUNE_ACT_SIGMOID;
  }
  return HPCTUNE_ACT_NONE;
}

int64_t in_size(const GpuLayerDesc& d) { return d.in_c * d.in_h * d.in_w; }
int64_t out_size(const GpuLayerDesc& d) { return d.out_c * d.out_h * d.out_w; }

Error layer_error(Errc code, size_t i, const GpuLayerDesc& d, const std::string& what) {
  return Error(code, "GpuNetwork: layer " + std::to_string(i) + " (" + kind_name(d.kind) + "): " + what);
}

std::string shape_string(int64_t c, int64_t h, int64_t w) {
  return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

// The checks of one layer on its own; chaining is checked by the caller.
Status check_layer(size_t i, const GpuLayerDesc& d) {
  for (int64_t v : {d.in_c, d.in_h, d.in_w, d.out_c, d.out_h, d.out_w})
    if (v < 1 || v > kMaxDim)
      return layer_error(Errc::kInvalidArgument, i, d, "a size out of [1, 2^24] (input " + shape_string(d.in_c, d.in_h, d.in_w) +
                                                          ", output " + shape_string(d.out_c, d.out_h, d.out_w) + ")");
  if (in_size(d) > kMaxSample || out_size(d) > kMaxSample)
    return layer_error(Errc::kInvalidArgument, i, d, "more than 2^28 values per sample");
  switch (d.kind) {
    case GpuLayerDesc::Kind::kDense:
      if (d.out_h != 1 || d.out_w != 1) return layer_error(Errc::kInvalidArgument, i, d, "the output must be out_c x 1 x 1");
      if (in_size(d) * d.out_c > kMaxBatchValues)
        return layer_error(Errc::kInvalidArgument, i, d, "more than 2^31 weights");
      return Status::Ok();
    case GpuLayerDesc::Kind::kConv: {
      const int64_t k = d.kernel, s = d.stride;
      if (k < 1 || k > 255 || k % 2 == 0) return layer_error(Errc::kInvalidArgument, i, d, "kernel must be odd, in [1, 255]");
      if (s < 1 || s > 255) return layer_error(Errc::kInvalidArgument, i, d, "stride out of [1, 255]");
      if (d.pad_top < 0 || d.pad_left < 0 || d.pad_top >= k || d.pad_left >= k)
        return layer_error(Errc::kInvalidArgument, i, d, "padding out of [0, kernel)");
      if (d.pad_top != d.pad_left)
        return layer_error(Errc::kUnavailable, i, d, "different top and left padding: the GPU backend's convolutions pad "
                                                     "every side alike (cuDNN)");
      if (d.out_c * d.in_c * k * k > kMaxBatchValues) return layer_error(Errc::kInvalidArgument, i, d, "too many weights");
      // cuDNN pads symmetrically: pad_top on both sides of each axis.
      auto sym = [&](int64_t in) { return in + 2 * d.pad_top >= k ? (in + 2 * d.pad_top - k) / s + 1 : 0; };
      // nn/'s "same" with stride > 1 may put one more row/column low-right: pad_top + 1 there.
      auto asym = [&](int64_t in) { return in + 2 * d.pad_top + 1 >= k ? (in + 2 * d.pad_top + 1 - k) / s + 1 : 0; };
      if (sym(d.in_h) == d.out_h && sym(d.in_w) == d.out_w) return Status::Ok();
      if (asym(d.in_h) == d.out_h && asym(d.in_w) == d.out_w)
        return layer_error(Errc::kUnavailable, i, d,
                           "asymmetric \"same\" padding (input " + shape_string(d.in_c, d.in_h, d.in_w) + ", kernel " +
                               std::to_string(k) + ", stride " + std::to_string(s) +
                               ": one more row/column of padding low-right than top-left); cuDNN pads symmetrically, so "
                               "this layer runs on the CPU only (use stride 1, padding valid, or an input size that "
                               "divides evenly)");
      return layer_error(Errc::kInvalidArgument, i, d,
                         "output " + shape_string(d.out_c, d.out_h, d.out_w) + " does not follow from input " +
                             shape_string(d.in_c, d.in_h, d.in_w) + ", kernel " + std::to_string(k) + ", stride " +
                             std::to_string(s) + ", padding " + std::to_string(d.pad_top));
    }
    case GpuLayerDesc::Kind::kMaxpool: {
      const int64_t k = d.kernel, s = d.stride;
      if (k < 1 || s < 1 || k > d.in_h || k > d.in_w)
        return layer_error(Errc::kInvalidArgument, i, d, "size out of [1, input height/width] or stride < 1");
      if (d.out_c != d.in_c || d.out_h != (d.in_h - k) / s + 1 || d.out_w != (d.in_w - k) / s + 1)
        return layer_error(Errc::kInvalidArgument, i, d, "output " + shape_string(d.out_c, d.out_h, d.out_w) +
                                                             " is not (H - size) / stride + 1 of input " +
                                                             shape_string(d.in_c, d.in_h, d.in_w));
      return Status::Ok();
    }
    case GpuLayerDesc::Kind::kDropout:
      if (!(d.rate >= 0.0 && d.rate < 1.0)) return layer_error(Errc::kInvalidArgument, i, d, "rate out of [0, 1)");
      if (d.out_c != d.in_c || d.out_h != d.in_h || d.out_w != d.in_w)
        return layer_error(Errc::kInvalidArgument, i, d, "output shape differs from the input's");
      return Status::Ok();
  }
  return layer_error(Errc::kInvalidArgument, i, d, "unknown kind");
}

}  // namespace

Result<GpuPrecision> parse_gpu_precision(const std::string& name) {
  if (name == "fp32") return GpuPrecision::kFp32;
  if (name == "tf32") return GpuPrecision::kTf32;
  if (name == "bf16") return GpuPrecision::kBf16;
  return err(Errc::kInvalidArgument, "unknown GPU precision '" + name + "' (known: fp32, tf32, bf16)");
}

const char* gpu_precision_name(GpuPrecision p) noexcept {
  switch (p) {
    case GpuPrecision::kFp32: return "fp32";
    case GpuPrecision::kTf32: return "tf32";
    case GpuPrecision::kBf16: return "bf16";
  }
  return "?";
}

size_t GpuLayerDesc::num_params() const noexcept {
  switch (kind) {
    case Kind::kDense: return static_cast<size_t>(in_c * in_h * in_w * out_c + out_c);
    case Kind::kConv: return static_cast<size_t>(out_c * in_c * kernel * kernel + out_c);
    default: return 0;
  }
}

// ---- GpuNetwork ---------------------------------------------------------------------------------

struct GpuNetwork::Impl {
  struct Layer {
    GpuLayerDesc d;
    size_t offset = 0;        // of its W in the parameter vector; b follows
    int64_t dropout_index = 0;  // among the dropout layers
    DeviceBuffer out;         // [max_batch, out_size]
    DeviceBuffer argmax;      // maxpool: [max_batch, out_size]
    DeviceBuffer x_bf16, w_bf16;  // dense under bf16: its input and W rounded
  };
  const GpuContext* ctx = nullptr;
  std::vector<Layer> layers;
  int64_t classes = 0;
  GpuNetworkOptions options;
  size_t num_params = 0;
  DeviceBuffer params, grads;
  DeviceBuffer delta_a, delta_b;  // the gradient flowing back, ping-pong
  DeviceBuffer dz_bf16;           // bf16: the dense layers' dz rounded
  DeviceBuffer loss, correct;
  int64_t images = 0;
  std::vector<const float*> ys;  // per layer, its output in the current pass

  const HpctuneGpuApi& api() const { return ctx->api(); }
  HpctuneGpuContext* raw() const { return ctx->raw(); }
  Status check(int rc, const char* what) const { return ctx->check(rc, what); }

  HpctuneConvShape conv_shape(const GpuLayerDesc& d, int64_t batch) const {
    HpctuneConvShape s{};
    s.n = batch, s.c = d.in_c, s.h = d.in_h, s.w = d.in_w;
    s.filters = d.out_c, s.kernel = d.kernel, s.stride = d.stride, s.pad = d.pad_top;
    s.out_h = d.out_h, s.out_w = d.out_w;
    s.math = options.precision == GpuPrecision::kFp32 ? 0 : 1;  // bf16: convolutions in TF32
    s.deterministic = options.deterministic ? 1 : 0;
    return s;
  }

  Status set_math() const {
    // bf16: tensor-op math for the bf16 GEMMs (no fp32 GEMM runs then); fp32: strict (pedantic).
    return check(api().set_tf32(raw(), options.precision == GpuPrecision::kFp32 ? 0 : 1), "set cuBLAS math mode");
  }

  // A dropout layer that passes its input on (not training, or rate 0): it has no buffer.
  static bool identity(const Layer& L, bool train) {
    return L.d.kind == GpuLayerDesc::Kind::kDropout && (!train || L.d.rate <= 0.0);
  }
  // ys for rows from row0 of input x, as a forward pass sets them (also for a pipeline stage's
  // backward pass of an earlier micro-batch).
  void point_outputs(const float* x, int64_t row0, bool train) {
    ys.assign(layers.size(), nullptr);
    for (size_t l = 0; l < layers.size(); ++l) {
      const float* in = l == 0 ? x : ys[l - 1];
      ys[l] = identity(layers[l], train) ? in : layers[l].out.as<float>() + row0 * out_size(layers[l].d);
    }
  }

  // Rows [row0, row0 + batch) of the layers' buffers (row0 is 0 but in a pipeline stage's
  // micro-batches).
  Status forward(const float* x, int64_t row0, int64_t batch, bool train, uint64_t seed, uint64_t offset) {
    const float* P = params.as<const float>();
    point_outputs(x, row0, train);
    const bool bf16 = options.precision == GpuPrecision::kBf16;
    for (size_t l = 0; l < layers.size(); ++l) {
      Layer& L = layers[l];
      const GpuLayerDesc& d = L.d;
      const float* in = l == 0 ? x : ys[l - 1];
      float* y = const_cast<float*>(ys[l]);
      uint16_t* x16 = bf16 && d.kind == GpuLayerDesc::Kind::kDense ? L.x_bf16.as<uint16_t>() + row0 * in_size(d) : nullptr;
      int32_t* argmax = d.kind == GpuLayerDesc::Kind::kMaxpool ? L.argmax.as<int32_t>() + row0 * out_size(d) : nullptr;
      switch (d.kind) {
        case GpuLayerDesc::Kind::kDense: {
          const int64_t ni = in_size(d), no = d.out_c;
          const float* W = P + L.offset;
          if (bf16) {
            HPCTUNE_TRY(check(api().f32_to_bf16(raw(), in, x16, batch * ni), "bf16 (dense input)"));
            HPCTUNE_TRY(check(api().f32_to_bf16(raw(), W, L.w_bf16.as<uint16_t>(), ni * no), "bf16 (dense weights)"));
            HPCTUNE_TRY(check(api().gemm_bf16(raw(), 0, 0, batch, no, ni, 1.f, x16,
                                              L.w_bf16.as<const uint16_t>(), 0.f, y),
                              "gemm bf16 (dense forward)"));
          } else {
            HPCTUNE_TRY(check(api().gemm(raw(), 0, 0, batch, no, ni, 1.f, in, W, 0.f, y), "gemm (dense forward)"));
          }
          HPCTUNE_TRY(check(api().bias_activation_nchw(raw(), y, W + ni * no, batch, no, 1, act_code(d.activation)),
                            "bias + activation (dense)"));
          break;
        }
        case GpuLayerDesc::Kind::kConv: {
          const HpctuneConvShape s = conv_shape(d, batch);
          const float* W = P + L.offset;
          HPCTUNE_TRY(check(api().conv_forward(raw(), &s, in, W, y), "conv forward (cuDNN)"));
          HPCTUNE_TRY(check(api().bias_activation_nchw(raw(), y, W + d.out_c * d.in_c * d.kernel * d.kernel, batch,
                                                       d.out_c, d.out_h * d.out_w, act_code(d.activation)),
                            "bias + activation (conv)"));
          break;
        }
        case GpuLayerDesc::Kind::kMaxpool:
          HPCTUNE_TRY(check(api().maxpool_forward(raw(), in, y, train ? argmax : nullptr, batch, d.in_c, d.in_h, d.in_w,
                                                  d.kernel, d.stride),
                            "maxpool forward"));
          break;
        case GpuLayerDesc::Kind::kDropout:
          if (identity(L, train)) break;  // ys[l] is its input
          HPCTUNE_TRY(check(api().dropout_forward(raw(), in, y, batch * in_size(d), d.rate, seed,
                                                  offset * kMaxLayers + uint64_t(L.dropout_index)),
                            "dropout forward"));
          break;
      }
    }
    return Status::Ok();
  }

  // From the output's gradient in delta_a (the loss's, or a later stage's): every layer's gradients
  // added into grads, for rows from row0 (a pipeline stage's micro-batch; ys as its forward set
  // them). With input_gradient (a pipeline stage after the first) the gradient of the input too,
  // which it returns (device memory, delta_a or delta_b); nullptr otherwise.
  Result<const float*> backward(const float* x, int64_t row0, int64_t batch, uint64_t seed, uint64_t offset,
                                bool input_gradient) {
    const float* P = params.as<const float>();
    float* G = grads.as<float>();
    float* dy = delta_a.as<float>();
    float* other = delta_b.as<float>();
    const bool bf16 = options.precision == GpuPrecision::kBf16;
    for (size_t l = layers.size(); l-- > 0;) {
      Layer& L = layers[l];
      const GpuLayerDesc& d = L.d;
      const float* in = l == 0 ? x : ys[l - 1];
      switch (d.kind) {
        case GpuLayerDesc::Kind::kDense: {
          const int64_t ni = in_size(d), no = d.out_c;
          const float* W = P + L.offset;
          float* gW = G + L.offset;
          if (d.activation != GpuActivation::kNone)
            HPCTUNE_TRY(check(api().activation_backward(raw(), ys[l], dy, dy, batch * no, act_code(d.activation)),
                              "activation backward (dense)"));
          if (bf16) {
            uint16_t* dz16 = dz_bf16.as<uint16_t>();
            HPCTUNE_TRY(check(api().f32_to_bf16(raw(), dy, dz16, batch * no), "bf16 (dense dz)"));
            HPCTUNE_TRY(check(api().gemm_bf16(raw(), 1, 0, ni, no, batch, 1.f, L.x_bf16.as<const uint16_t>() + row0 * ni, dz16,
                                              1.f, gW),
                              "gemm bf16 (dense weight gradient)"));
          } else {
            HPCTUNE_TRY(check(api().gemm(raw(), 1, 0, ni, no, batch, 1.f, in, dy, 1.f, gW), "gemm (dense weight gradient)"));
          }
          HPCTUNE_TRY(check(api().bias_gradient(raw(), dy, gW + ni * no, batch, no), "bias gradient (dense)"));
          if (l == 0 && !input_gradient) break;
          if (bf16) {
            HPCTUNE_TRY(check(api().gemm_bf16(raw(), 0, 1, batch, ni, no, 1.f, dz_bf16.as<const uint16_t>(),
                                              L.w_bf16.as<const uint16_t>(), 0.f, other),
                              "gemm bf16 (dense input gradient)"));
          } else {
            HPCTUNE_TRY(check(api().gemm(raw(), 0, 1, batch, ni, no, 1.f, dy, W, 0.f, other), "gemm (dense input gradient)"));
          }
          std::swap(dy, other);
          break;
        }
        case GpuLayerDesc::Kind::kConv: {
          const HpctuneConvShape s = conv_shape(d, batch);
          const float* W = P + L.offset;
          float* gW = G + L.offset;
          const int64_t wsize = d.out_c * d.in_c * d.kernel * d.kernel;
          if (d.activation != GpuActivation::kNone)
            HPCTUNE_TRY(check(api().activation_backward(raw(), ys[l], dy, dy, batch * out_size(d), act_code(d.activation)),
                              "activation backward (conv)"));
          HPCTUNE_TRY(check(api().conv_backward_filter(raw(), &s, in, dy, gW), "conv backward filter (cuDNN)"));
          HPCTUNE_TRY(check(api().bias_gradient_nchw(raw(), dy, gW + wsize, batch, d.out_c, d.out_h * d.out_w),
                            "bias gradient (conv)"));
          if (l == 0 && !input_gradient) break;
          HPCTUNE_TRY(check(api().conv_backward_data(raw(), &s, dy, W, other), "conv backward data (cuDNN)"));
          std::swap(dy, other);
          break;
        }
        case GpuLayerDesc::Kind::kMaxpool:
          if (l == 0 && !input_gradient) break;
          HPCTUNE_TRY(check(api().maxpool_backward(raw(), dy, L.argmax.as<const int32_t>() + row0 * out_size(d), other, batch,
                                                   d.in_c, d.in_h,
                                                   d.in_w, d.kernel, d.stride),
                            "maxpool backward"));
          std::swap(dy, other);
          break;
        case GpuLayerDesc::Kind::kDropout:
          if ((l == 0 && !input_gradient) || d.rate <= 0.0) break;
          HPCTUNE_TRY(check(api().dropout_backward(raw(), dy, dy, batch * in_size(d), d.rate, seed,
                                                   offset * kMaxLayers + uint64_t(L.dropout_index)),
                            "dropout backward"));
          break;
      }
    }
    return input_gradient ? dy : nullptr;
  }

  Status check_rows(int64_t row0, int64_t n, const char* what) const;
  Status check_batch(int64_t batch, const char* what) const {
    if (batch < 1 || batch > options.max_batch)
      return err(Errc::kInvalidArgument, std::string("GpuNetwork::") + what + ": batch " + std::to_string(batch) +
                                             " out of [1, max_batch " + std::to_string(options.max_batch) + "]");
    return Status::Ok();
  }
};

GpuNetwork::GpuNetwork(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuNetwork::GpuNetwork(GpuNetwork&&) noexcept = default;
GpuNetwork& GpuNetwork::operator=(GpuNetwork&&) noexcept = default;
GpuNetwork::~GpuNetwork() = default;

Result<GpuNetwork> GpuNetwork::create(const GpuContext& ctx, std::vector<GpuLayerDesc> layers, int64_t classes,
                                      std::span<const float> params, const GpuNetworkOptions& options) {
  if (layers.empty() || layers.size() > kMaxLayers)
    return err(Errc::kInvalidArgument, "GpuNetwork: " + std::to_string(layers.size()) + " layers, out of [1, 1024]");
  if (options.last_stage && (classes < 1 || classes > kMaxDim))
    return err(Errc::kInvalidArgument, "GpuNetwork: classes out of [1, 2^24]");
  if (options.max_batch < 1 || options.max_batch > kMaxBatch)
    return err(Errc::kInvalidArgument, "GpuNetwork: max_batch " + std::to_string(options.max_batch) + " out of [1, 2^20]");
  size_t total = 0;
  bool any_conv = false;
  for (size_t i = 0; i < layers.size(); ++i) {
    const GpuLayerDesc& d = layers[i];
    HPCTUNE_TRY(check_layer(i, d));
    if (options.max_batch * std::max(in_size(d), out_size(d)) > kMaxBatchValues)
      return layer_error(Errc::kInvalidArgument, i, d, "max_batch x its values exceeds 2^31");
    if (i > 0) {
      const GpuLayerDesc& p = layers[i - 1];
      const bool chains = d.kind == GpuLayerDesc::Kind::kDense
                              ? in_size(d) == out_size(p)
                              : (d.in_c == p.out_c && d.in_h == p.out_h && d.in_w == p.out_w);
      if (!chains)
        return layer_error(Errc::kInvalidArgument, i, d, "input " + shape_string(d.in_c, d.in_h, d.in_w) +
                                                             " does not chain to layer " + std::to_string(i - 1) +
                                                             "'s output " + shape_string(p.out_c, p.out_h, p.out_w));
    }
    any_conv = any_conv || d.kind == GpuLayerDesc::Kind::kConv;
    total += d.num_params();
  }
  if (options.last_stage && out_size(layers.back()) != classes)
    return err(Errc::kInvalidArgument, "GpuNetwork: the last layer has " + std::to_string(out_size(layers.back())) +
                                           " outputs, not the " + std::to_string(classes) + " classes");
  if (params.size() != total)
    return err(Errc::kInvalidArgument, "GpuNetwork: " + std::to_string(params.size()) + " parameters given, the layers have " +
                                           std::to_string(total));
  if (any_conv) {
    int64_t version = 0;
    if (ctx.api().cudnn_version(&version) != 0) {
      const char* why = ctx.api().last_error();
      return err(Errc::kUnavailable, std::string("GpuNetwork: a conv layer needs cuDNN: ") + (why ? why : "unavailable"));
    }
  }

  auto impl = std::make_unique<Impl>();
  impl->ctx = &ctx;
  impl->classes = classes;
  impl->options = options;
  impl->num_params = total;
  const int64_t mb = options.max_batch;
  int64_t widest = options.last_stage ? classes : 1, widest_dense_out = 1, dropouts = 0;
  size_t offset = 0;
  for (auto& d : layers) {
    Impl::Layer L;
    L.d = d;
    L.offset = offset;
    offset += d.num_params();
    widest = std::max({widest, in_size(d), out_size(d)});
    if (d.kind != GpuLayerDesc::Kind::kDropout || d.rate > 0.0) {
      HPCTUNE_ASSIGN(L.out, ctx.allocate(size_t(mb * out_size(d)) * sizeof(float)));
    }
    if (d.kind == GpuLayerDesc::Kind::kMaxpool) {
      HPCTUNE_ASSIGN(L.argmax, ctx.allocate(size_t(mb * out_size(d)) * sizeof(int32_t)));
    }
    if (d.kind == GpuLayerDesc::Kind::kDropout) L.dropout_index = dropouts++;
    if (d.kind == GpuLayerDesc::Kind::kDense && options.precision == GpuPrecision::kBf16) {
      HPCTUNE_ASSIGN(L.x_bf16, ctx.allocate(size_t(mb * in_size(d)) * sizeof(uint16_t)));
      HPCTUNE_ASSIGN(L.w_bf16, ctx.allocate(size_t(in_size(d) * d.out_c) * sizeof(uint16_t)));
      widest_dense_out = std::max(widest_dense_out, d.out_c);
    }
    impl->layers.push_back(std::move(L));
  }
  HPCTUNE_ASSIGN(impl->params, ctx.upload(params));
  HPCTUNE_ASSIGN(impl->grads, ctx.allocate(params.size_bytes()));
  HPCTUNE_TRY(impl->grads.fill_zero());
  HPCTUNE_ASSIGN(impl->delta_a, ctx.allocate(size_t(mb * widest) * sizeof(float)));
  HPCTUNE_ASSIGN(impl->delta_b, ctx.allocate(size_t(mb * widest) * sizeof(float)));
  if (options.precision == GpuPrecision::kBf16) {
    HPCTUNE_ASSIGN(impl->dz_bf16, ctx.allocate(size_t(mb * widest_dense_out) * sizeof(uint16_t)));
  }
  HPCTUNE_ASSIGN(impl->loss, ctx.allocate(sizeof(float)));
  HPCTUNE_ASSIGN(impl->correct, ctx.allocate(sizeof(int32_t)));
  HPCTUNE_TRY(impl->loss.fill_zero());
  HPCTUNE_TRY(impl->correct.fill_zero());
  HPCTUNE_TRY(ctx.synchronize());
  return GpuNetwork(std::move(impl));
}

size_t GpuNetwork::num_params() const noexcept { return impl_->num_params; }
float* GpuNetwork::d_params() const noexcept { return impl_->params.as<float>(); }
float* GpuNetwork::d_grads() const noexcept { return impl_->grads.as<float>(); }

Status GpuNetwork::set_params(std::span<const float> host) {
  if (host.size() != impl_->num_params)
    return err(Errc::kInvalidArgument, "GpuNetwork::set_params: " + std::to_string(host.size()) + " values for " +
                                           std::to_string(impl_->num_params) + " parameters");
  return impl_->params.write(host.data(), host.size_bytes());
}

Result<std::vector<float>> GpuNetwork::params() const { return impl_->params.read<float>(); }
Result<std::vector<float>> GpuNetwork::grads() const { return impl_->grads.read<float>(); }

Status GpuNetwork::forward_backward(const float* d_x, const int32_t* d_labels, int64_t batch, float grad_scale,
                                    uint64_t dropout_seed, uint64_t dropout_offset, bool accumulate) {
  Impl& m = *impl_;
  HPCTUNE_TRY(m.check_batch(batch, "forward_backward"));
  if (d_x == nullptr || d_labels == nullptr)
    return err(Errc::kInvalidArgument, "GpuNetwork::forward_backward: null input or labels");
  HPCTUNE_TRY(m.set_math());
  if (!accumulate) HPCTUNE_TRY(m.grads.fill_zero());
  HPCTUNE_TRY(m.forward(d_x, 0, batch, true, dropout_seed, dropout_offset));
  HPCTUNE_TRY(m.check(m.api().softmax_cross_entropy(m.raw(), m.ys.back(), d_labels, batch, m.classes, grad_scale,
                                                    m.delta_a.as<float>(), m.loss.as<float>(), m.correct.as<int32_t>()),
                      "softmax cross-entropy"));
  HPCTUNE_TRY(m.backward(d_x, 0, batch, dropout_seed, dropout_offset, false));
  m.images += batch;
  return Status::Ok();
}

Status GpuNetwork::evaluate(const float* d_x, const int32_t* d_labels, int64_t batch, float* d_probs) {
  Impl& m = *impl_;
  HPCTUNE_TRY(m.check_batch(batch, "evaluate"));
  if (d_x == nullptr || d_labels == nullptr) return err(Errc::kInvalidArgument, "GpuNetwork::evaluate: null input or labels");
  HPCTUNE_TRY(m.set_math());
  HPCTUNE_TRY(m.forward(d_x, 0, batch, false, 0, 0));
  HPCTUNE_TRY(m.check(m.api().softmax_cross_entropy(m.raw(), m.ys.back(), d_labels, batch, m.classes, 0.f, nullptr,
                                                    m.loss.as<float>(), m.correct.as<int32_t>()),
                      "softmax cross-entropy (evaluate)"));
  if (d_probs != nullptr)
    HPCTUNE_TRY(m.check(m.api().softmax(m.raw(), m.ys.back(), batch, m.classes, d_probs), "softmax (probabilities)"));
  m.images += batch;
  return Status::Ok();
}

Result<GpuStepStats> GpuNetwork::take_stats() {
  Impl& m = *impl_;
  HPCTUNE_ASSIGN(auto loss, m.loss.read<float>());
  HPCTUNE_ASSIGN(auto correct, m.correct.read<int32_t>());
  GpuStepStats s{loss[0], correct[0], m.images};
  HPCTUNE_TRY(m.loss.fill_zero());
  HPCTUNE_TRY(m.correct.fill_zero());
  m.images = 0;
  return s;
}

// ---- Pipeline stages ---------------------------------------------------------------------------

Status GpuNetwork::Impl::check_rows(int64_t row0, int64_t n, const char* what) const {
  if (row0 < 0 || n < 1 || row0 + n > options.max_batch)
    return err(Errc::kInvalidArgument, std::string("GpuNetwork::") + what + ": rows [" + std::to_string(row0) + ", " +
                                           std::to_string(row0 + n) + ") out of [0, max_batch " +
                                           std::to_string(options.max_batch) + ")");
  return Status::Ok();
}

Result<const float*> GpuNetwork::stage_forward(const float* d_in, int64_t row0, int64_t n, bool train,
                                               uint64_t dropout_seed, uint64_t dropout_offset) {
  Impl& m = *impl_;
  HPCTUNE_TRY(m.check_rows(row0, n, "stage_forward"));
  if (d_in == nullptr) return err(Errc::kInvalidArgument, "GpuNetwork::stage_forward: null input");
  HPCTUNE_TRY(m.set_math());
  HPCTUNE_TRY(m.forward(d_in, row0, n, train, dropout_seed, dropout_offset));
  return m.ys.back();
}

Status GpuNetwork::stage_loss(const int32_t* d_labels, int64_t row0, int64_t n, bool train, float grad_scale,
                              float* d_probs) {
  Impl& m = *impl_;
  if (!m.options.last_stage) return err(Errc::kInvalidArgument, "GpuNetwork::stage_loss: not the last stage");
  HPCTUNE_TRY(m.check_rows(row0, n, "stage_loss"));
  if (d_labels == nullptr) return err(Errc::kInvalidArgument, "GpuNetwork::stage_loss: null labels");
  // The logits of these rows: the last layer's buffer (an identity dropout last passes its input on).
  m.point_outputs(nullptr, row0, train);
  const float* logits = m.ys.back();
  if (logits == nullptr) return err(Errc::kInvalidArgument, "GpuNetwork::stage_loss: the stage ends in an identity layer");
  HPCTUNE_TRY(m.check(m.api().softmax_cross_entropy(m.raw(), logits, d_labels, n, m.classes, train ? grad_scale : 0.f,
                                                    train ? m.delta_a.as<float>() : nullptr, m.loss.as<float>(),
                                                    m.correct.as<int32_t>()),
                      "softmax cross-entropy (stage)"));
  if (d_probs != nullptr)
    HPCTUNE_TRY(m.check(m.api().softmax(m.raw(), logits, n, m.classes, d_probs), "softmax (stage probabilities)"));
  m.images += n;
  return Status::Ok();
}

float* GpuNetwork::stage_delta() const noexcept { return impl_->delta_a.as<float>(); }

Result<const float*> GpuNetwork::stage_backward(const float* d_in, int64_t row0, int64_t n, uint64_t dropout_seed,
                                                uint64_t dropout_offset) {
  Impl& m = *impl_;
  HPCTUNE_TRY(m.check_rows(row0, n, "stage_backward"));
  if (d_in == nullptr) return err(Errc::kInvalidArgument, "GpuNetwork::stage_backward: null input");
  HPCTUNE_TRY(m.set_math());
  m.point_outputs(d_in, row0, true);
  return m.backward(d_in, row0, n, dropout_seed, dropout_offset, !m.options.first_stage);
}

Status GpuNetwork::zero_grads() { return impl_->grads.fill_zero(); }

int64_t GpuNetwork::input_size() const noexcept { return in_size(impl_->layers.front().d); }
int64_t GpuNetwork::output_size() const noexcept { return out_size(impl_->layers.back().d); }

// ---- GpuOptimizer -------------------------------------------------------------------------------

namespace {
size_t buffer_count(const GpuOptimizerOptions& o) {
  if (o.kind == GpuOptimizerOptions::Kind::kSgd) return o.momentum != 0.0 ? 1 : 0;
  return 2;
}
}  // namespace

Result<GpuOptimizer> GpuOptimizer::create(const GpuContext& ctx, size_t num_params, const GpuOptimizerOptions& options) {
  if (num_params < 1 || num_params > size_t(kMaxBatchValues))
    return err(Errc::kInvalidArgument, "GpuOptimizer: " + std::to_string(num_params) + " parameters, out of [1, 2^31)");
  GpuOptimizer o;
  o.ctx_ = &ctx;
  o.num_params_ = num_params;
  o.options_ = options;
  for (size_t i = 0; i < buffer_count(options); ++i) {
    HPCTUNE_ASSIGN(DeviceBuffer b, ctx.allocate(num_params * sizeof(float)));
    HPCTUNE_TRY(b.fill_zero());
    o.buffers_.push_back(std::move(b));
  }
  return o;
}

Status GpuOptimizer::step(float* d_params, const float* d_grads, const std::vector<GpuParamBlock>& blocks, float lr) {
  if (d_params == nullptr || d_grads == nullptr) return err(Errc::kInvalidArgument, "GpuOptimizer::step: null parameters or gradients");
  ++steps_;
  const auto& api = ctx_->api();
  HpctuneGpuContext* c = ctx_->raw();
  const auto& o = options_;
  auto update = [&](size_t offset, size_t n, bool decay, float rate) -> Status {
    const float wd = decay ? static_cast<float>(o.weight_decay) : 0.0f;
    float* p = d_params + offset;
    const float* g = d_grads + offset;
    if (o.kind == GpuOptimizerOptions::Kind::kSgd) {
      float* v = buffers_.empty() ? nullptr : buffers_[0].as<float>() + offset;
      return ctx_->check(api.sgd_update(c, p, g, v, int64_t(n), rate, static_cast<float>(o.momentum), wd, o.nesterov ? 1 : 0),
                         "SGD update");
    }
    return ctx_->check(api.adam_update(c, p, g, buffers_[0].as<float>() + offset, buffers_[1].as<float>() + offset,
                                       int64_t(n), rate, static_cast<float>(o.beta1), static_cast<float>(o.beta2),
                                       static_cast<float>(o.eps), wd, o.kind == GpuOptimizerOptions::Kind::kAdamW ? 1 : 0,
                                       steps_),
                       "Adam update");
  };
  // nn::Optimizer::step's walk: gaps between blocks update without decay, frozen blocks not at all.
  const size_t n = num_params_;
  size_t pos = 0;
  for (const auto& b : blocks) {
    if (b.offset >= n) break;
    if (b.offset > pos) HPCTUNE_TRY(update(pos, b.offset - pos, false, lr));
    const size_t start = std::max(pos, b.offset);
    const size_t end = std::min(n, b.offset + b.size);
    if (end > start && !b.frozen) HPCTUNE_TRY(update(start, end - start, b.decay, lr * b.lr_scale));
    pos = std::max(pos, end);
  }
  if (pos < n) HPCTUNE_TRY(update(pos, n - pos, false, lr));
  return Status::Ok();
}

Result<std::vector<std::vector<float>>> GpuOptimizer::buffers() const {
  std::vector<std::vector<float>> out;
  for (const auto& b : buffers_) {
    HPCTUNE_ASSIGN(auto host, b.read<float>());
    out.push_back(std::move(host));
  }
  return out;
}

Status GpuOptimizer::set_state(int64_t steps, const std::vector<std::vector<float>>& buffers) {
  if (buffers.size() != buffers_.size())
    return err(Errc::kInvalidArgument, "GpuOptimizer: the state has " + std::to_string(buffers.size()) + " buffers, this optimizer needs " +
                                           std::to_string(buffers_.size()));
  for (const auto& b : buffers)
    if (b.size() != num_params_)
      return err(Errc::kInvalidArgument, "GpuOptimizer: a state buffer of " + std::to_string(b.size()) + " values for " +
                                             std::to_string(num_params_) + " parameters");
  if (steps < 0) return err(Errc::kInvalidArgument, "GpuOptimizer: a negative step count");
  for (size_t i = 0; i < buffers.size(); ++i)
    HPCTUNE_TRY(buffers_[i].write(buffers[i].data(), buffers[i].size() * sizeof(float)));
  steps_ = steps;
  return Status::Ok();
}

// ---- GpuDataset ---------------------------------------------------------------------------------

Result<GpuDataset> GpuDataset::create(const GpuContext& ctx, std::span<const float> images, std::span<const int32_t> labels,
                                      int64_t features, int64_t max_batch) {
  if (features < 1 || features > kMaxSample) return err(Errc::kInvalidArgument, "GpuDataset: features out of [1, 2^28]");
  if (max_batch < 1 || max_batch > kMaxBatch || max_batch * features > kMaxBatchValues)
    return err(Errc::kInvalidArgument, "GpuDataset: max_batch " + std::to_string(max_batch) + " out of range");
  if (labels.empty()) return err(Errc::kInvalidArgument, "GpuDataset: no rows");
  if (images.size() != labels.size() * size_t(features))
    return err(Errc::kInvalidArgument, "GpuDataset: " + std::to_string(images.size()) + " image values for " +
                                           std::to_string(labels.size()) + " rows of " + std::to_string(features));
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0) return err(Errc::kInvalidArgument, "GpuDataset: row " + std::to_string(i) + " has a negative label");
  GpuDataset d;
  d.ctx_ = &ctx;
  d.rows_ = int64_t(labels.size());
  d.features_ = features;
  d.max_batch_ = max_batch;
  HPCTUNE_ASSIGN(d.images_, ctx.upload(images));
  HPCTUNE_ASSIGN(d.labels_, ctx.upload(labels));
  HPCTUNE_ASSIGN(d.index_, ctx.allocate(size_t(max_batch) * sizeof(int64_t)));
  HPCTUNE_ASSIGN(d.batch_x_, ctx.allocate(size_t(max_batch * features) * sizeof(float)));
  HPCTUNE_ASSIGN(d.batch_y_, ctx.allocate(size_t(max_batch) * sizeof(int32_t)));
  HPCTUNE_TRY(ctx.synchronize());
  return d;
}

Status GpuDataset::gather(std::span<const int64_t> rows) {
  if (rows.empty() || int64_t(rows.size()) > max_batch_)
    return err(Errc::kInvalidArgument, "GpuDataset::gather: " + std::to_string(rows.size()) + " rows, out of [1, max_batch " +
                                           std::to_string(max_batch_) + "]");
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < 0 || rows[i] >= rows_)
      return err(Errc::kInvalidArgument, "GpuDataset::gather: index " + std::to_string(i) + " is row " +
                                             std::to_string(rows[i]) + ", out of [0, " + std::to_string(rows_) + ")");
  HPCTUNE_TRY(index_.write(rows.data(), rows.size_bytes()));
  return ctx_->check(ctx_->api().gather_rows(ctx_->raw(), images_.as<const float>(), labels_.as<const int32_t>(), rows_,
                                             features_, index_.as<const int64_t>(), int64_t(rows.size()),
                                             batch_x_.as<float>(), batch_y_.as<int32_t>()),
                     "gather rows");
}

}  // namespace hpctune::gpu
