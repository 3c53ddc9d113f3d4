// Convolution and max-pooling layers on oneDNN.
//
// The network's activations are plain NCHW. A convolution's primitives are created with
// format_tag::any so that oneDNN picks its fast (blocked) layouts for the data it reads and
// writes; a Port converts between the plain tensor and the primitive's layout with a cached
// reorder, and is a no-op when the two agree (conv 1 reads its 1-channel NCHW input directly).
// Everything a batch size needs (primitive descriptors, primitives, reorders, blocked buffers) is
// created on the first batch of that size and cached in the layer; a training step creates nothing.
//
// Threading: Debian builds oneDNN with OpenMP, so its primitives use the OpenMP thread count of the
// calling thread (dnnl_set_threads()).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "nn/denormals.h"
#include "nn/layers.h"

namespace hpctune::nn {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

void dnnl_set_threads(int threads) noexcept {
  omp_set_num_threads(std::max(1, threads));
  // The pool's threads run the kernels: they flush denormals too (denormals.h).
#pragma omp parallel
  flush_denormals_on_this_thread();
}

std::string dnnl_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

int64_t blocked_layout_block() noexcept {
  static const int64_t block = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case dnnl::cpu_isa::avx512_core:
      case dnnl::cpu_isa::avx512_core_vnni:
      case dnnl::cpu_isa::avx512_core_bf16:
      case dnnl::cpu_isa::avx512_core_amx:
        return int64_t{16};
      default:
        return int64_t{8};
    }
  }();
  return block;
}

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, bool same_padding) noexcept {
  if (same_padding) return (in + stride - 1) / stride;
  return in >= kernel ? (in - kernel) / stride + 1 : 0;
}

namespace {

tag layout_tag(Layout layout) {
  if (layout == Layout::kPlain) return tag::nchw;
  return blocked_layout_block() == 16 ? tag::nChw16c : tag::nChw8c;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Moves a tensor between its plain layout (the caller's buffer) and a primitive's layout.
//
// `serial` runs the reorder on the calling thread alone: for the small weight tensors an OpenMP
// parallel region costs more than the copy (and much more when the cores are shared).
class Port {
 public:
  Port() = default;
  Port(const memory::desc& plain, const memory::desc& prim, bool serial = false)
      : same_(plain == prim), serial_(serial), user_(plain, cpu_engine(), DNNL_MEMORY_NONE) {
    if (!same_) {
      prim_ = memory(prim, cpu_engine());
      to_prim_ = dnnl::reorder(user_, prim_);
      from_prim_ = dnnl::reorder(prim_, user_);
    }
  }
  // The primitive-side memory holding the plain tensor at `data` (reordered when the layouts differ).
  memory& in(const float* data, dnnl::stream& s) {
    user_.set_data_handle(const_cast<float*>(data));
    if (same_) return user_;
    run(to_prim_, user_, prim_, s);
    return prim_;
  }
  // The primitive-side memory to write a result for `data` into; finish_out() copies it there.
  memory& out(float* data) {
    user_.set_data_handle(data);
    return same_ ? user_ : prim_;
  }
  void finish_out(dnnl::stream& s) {
    if (!same_) run(from_prim_, prim_, user_, s);
  }

 private:
  void run(dnnl::reorder& r, memory& from, memory& to, dnnl::stream& s) {
    if (!serial_) return r.execute(s, from, to);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    r.execute(s, from, to);
    s.wait();
    omp_set_num_threads(threads);
  }

  bool same_ = true;
  bool serial_ = false;
  memory user_, prim_;
  dnnl::reorder to_prim_, from_prim_;
};

dnnl::algorithm eltwise_of(LayerActivation a) {
  switch (a) {
    case LayerActivation::kRelu: return dnnl::algorithm::eltwise_relu;
    case LayerActivation::kTanh: return dnnl::algorithm::eltwise_tanh;
    case LayerActivation::kSigmoid: return dnnl::algorithm::eltwise_logistic;
    case LayerActivation::kNone: break;
  }
  return dnnl::algorithm::undef;
}

class ConvLayer final : public Layer {
 public:
  ConvLayer(Shape in, int64_t filters, int64_t kernel, int64_t stride, bool same, LayerActivation act, Layout in_layout,
            Layout out_layout)
      : in_(in), filters_(filters), k_(kernel), stride_(stride), same_(same), act_(act), in_layout_(in_layout),
        out_layout_(out_layout) {
    out_ = {filters_, conv_output_size(in.h, k_, stride_, same_), conv_output_size(in.w, k_, stride_, same_)};
    if (same_) {
      // Total padding so that the output is ceil(H / stride); the extra goes low-right, as
      // TensorFlow's "same" does. With stride 1 and an odd kernel: (k - 1) / 2 each side.
      const int64_t ph = std::max<int64_t>(0, (out_.h - 1) * stride_ + k_ - in.h);
      const int64_t pw = std::max<int64_t>(0, (out_.w - 1) * stride_ + k_ - in.w);
      pad_l_ = {ph / 2, pw / 2};
      pad_r_ = {ph - ph / 2, pw - pw / 2};
    } else {
      pad_l_ = {0, 0};
      pad_r_ = {0, 0};
    }
  }

  std::string describe() const override {
    return "conv " + std::to_string(k_) + "x" + std::to_string(k_) + " " + std::to_string(filters_) +
           (same_ ? " same" : " valid") + (stride_ != 1 ? " stride " + std::to_string(stride_) : "") + " " +
           layer_activation_name(act_);
  }
  Shape input_shape() const override { return in_; }
  Shape output_shape() const override { return out_; }
  size_t num_params() const override { return weights_size() + static_cast<size_t>(filters_); }
  std::vector<ParamBlock> param_blocks() const override {
    return {{0, weights_size(), true}, {weights_size(), static_cast<size_t>(filters_), false}};
  }
  std::vector<std::vector<int64_t>> param_shapes() const override { return {{filters_, in_.c, k_, k_}, {filters_}}; }
  // He-normal (fan_in = C k k) into ReLU, Glorot-uniform otherwise; biases 0.
  void init(std::span<float> params, Rng& rng) const override {
    const size_t n = weights_size();
    const double fan_in = static_cast<double>(in_.c * k_ * k_), fan_out = static_cast<double>(filters_ * k_ * k_);
    if (act_ == LayerActivation::kRelu) {
      const double sd = std::sqrt(2.0 / fan_in);
      for (size_t i = 0; i < n; ++i) params[i] = static_cast<float>(rng.normal() * sd);
    } else {
      const double a = std::sqrt(6.0 / (fan_in + fan_out));
      for (size_t i = 0; i < n; ++i) params[i] = static_cast<float>(rng.uniform(-a, a));
    }
    std::fill(params.begin() + static_cast<std::ptrdiff_t>(n), params.end(), 0.0f);
  }

  void forward(std::span<const float> params, const float* x, float* y, int64_t batch, bool train, Rng*,
               LayerState*) override {
    Kernels& k = kernels(batch);
    dnnl::stream s(cpu_engine());
    memory& src = k.fwd_src.in(x, s);
    memory& w = k.fwd_w.in(params.data(), s);
    k.bias.set_data_handle(const_cast<float*>(params.data() + weights_size()));
    memory& dst = k.fwd_dst.out(y);
    k.fwd.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, k.bias}, {DNNL_ARG_DST, dst}});
    k.fwd_dst.finish_out(s);
    s.wait();
    (void)train;
  }

  void backward(std::span<const float> params, std::span<float> grads, const float* x, const float* y,
                const float* dy, float* dx, int64_t batch, LayerState*) override {
    Kernels& k = kernels(batch);
    dnnl::stream s(cpu_engine());
    // dz = dy * act'(z), from the output y (plain layout).
    const size_t count = static_cast<size_t>(batch * out_.size());
    const float* dz = dy;
    if (act_ != LayerActivation::kNone) {
      if (dz_.size() < count) dz_.resize(count);
      activation_backward(act_, y, dy, dz_.data(), count);
      dz = dz_.data();
    }
    // Weights and bias gradients into scratch (oneDNN overwrites), then added to grads.
    {
      memory& src = k.bw_src.in(x, s);
      memory& ddst = k.bw_ddst.in(dz, s);
      memory& dw = k.bw_dw.out(k.dw_plain.data());
      k.dbias.set_data_handle(k.db_plain.data());
      k.bwd_w.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dw},
                          {DNNL_ARG_DIFF_BIAS, k.dbias}});
      k.bw_dw.finish_out(s);
      s.wait();
      float* g = grads.data();
      for (size_t i = 0; i < weights_size(); ++i) g[i] += k.dw_plain[i];
      float* gb = g + weights_size();
      for (int64_t i = 0; i < filters_; ++i) gb[i] += k.db_plain[static_cast<size_t>(i)];
    }
    if (dx != nullptr) {
      memory& ddst = k.bd_ddst.in(dz, s);
      memory& w = k.bd_w.in(params.data(), s);
      memory& dsrc = k.bd_dsrc.out(dx);
      k.bwd_d.execute(s, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, dsrc}});
      k.bd_dsrc.finish_out(s);
      s.wait();
    }
  }

 private:
  struct Kernels {
    dnnl::convolution_forward fwd;
    dnnl::convolution_backward_data bwd_d;
    dnnl::convolution_backward_weights bwd_w;
    Port fwd_src, fwd_w, fwd_dst;
    Port bd_ddst, bd_w, bd_dsrc;
    Port bw_src, bw_ddst, bw_dw;
    memory bias, dbias;
    std::vector<float> dw_plain, db_plain;
  };

  size_t weights_size() const noexcept { return static_cast<size_t>(filters_ * in_.c * k_ * k_); }

  Kernels& kernels(int64_t batch) {
    auto it = cache_.find(batch);
    if (it != cache_.end()) return it->second;
    auto& eng = cpu_engine();
    const memory::dims src_dims = {batch, in_.c, in_.h, in_.w};
    const memory::dims dst_dims = {batch, out_.c, out_.h, out_.w};
    const memory::dims w_dims = {filters_, in_.c, k_, k_};
    const memory::dims b_dims = {filters_};
    const memory::dims strides = {stride_, stride_};
    // "plain" here: the layout of the caller's buffers (NCHW or the network's blocked layout).
    const memory::desc src_plain(src_dims, dt::f32, layout_tag(in_layout_));
    const memory::desc dst_plain(dst_dims, dt::f32, layout_tag(out_layout_));
    const memory::desc w_plain(w_dims, dt::f32, tag::oihw), b_md(b_dims, dt::f32, tag::x);
    const memory::desc src_any(src_dims, dt::f32, tag::any), dst_any(dst_dims, dt::f32, tag::any);
    const memory::desc w_any(w_dims, dt::f32, tag::any);

    Kernels k;
    dnnl::primitive_attr attr;
    if (act_ != LayerActivation::kNone) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, eltwise_of(act_), 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::convolution_forward::primitive_desc fwd_pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_any,
                                        w_any, b_md, dst_any, strides, pad_l_, pad_r_),
        attr, eng);
    k.fwd = dnnl::convolution_forward(fwd_pd);
    k.fwd_src = Port(src_plain, fwd_pd.src_desc());
    k.fwd_w = Port(w_plain, fwd_pd.weights_desc(), true);
    k.fwd_dst = Port(dst_plain, fwd_pd.dst_desc());
    k.bias = memory(b_md, eng, DNNL_MEMORY_NONE);

    const dnnl::convolution_backward_data::primitive_desc bd_pd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src_any, w_any, dst_any, strides,
                                              pad_l_, pad_r_),
        eng, fwd_pd);
    k.bwd_d = dnnl::convolution_backward_data(bd_pd);
    k.bd_ddst = Port(dst_plain, bd_pd.diff_dst_desc());
    k.bd_w = Port(w_plain, bd_pd.weights_desc(), true);
    k.bd_dsrc = Port(src_plain, bd_pd.diff_src_desc());

    const dnnl::convolution_backward_weights::primitive_desc bw_pd(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src_any, w_any, b_md, dst_any,
                                                 strides, pad_l_, pad_r_),
        eng, fwd_pd);
    k.bwd_w = dnnl::convolution_backward_weights(bw_pd);
    k.bw_src = Port(src_plain, bw_pd.src_desc());
    k.bw_ddst = Port(dst_plain, bw_pd.diff_dst_desc());
    k.bw_dw = Port(w_plain, bw_pd.diff_weights_desc(), true);
    k.dbias = memory(b_md, eng, DNNL_MEMORY_NONE);
    k.dw_plain.resize(weights_size());
    k.db_plain.resize(static_cast<size_t>(filters_));
    return cache_.emplace(batch, std::move(k)).first->second;
  }

  Shape in_, out_;
  int64_t filters_, k_, stride_;
  bool same_;
  LayerActivation act_;
  Layout in_layout_, out_layout_;
  memory::dims pad_l_, pad_r_;
  std::map<int64_t, Kernels> cache_;
  std::vector<float> dz_;
};

// Max pooling with the argmax kept in a oneDNN workspace in the pass's state.
struct PoolState final : LayerState {
  std::vector<uint8_t> workspace;
};

class MaxPoolLayer final : public Layer {
 public:
  MaxPoolLayer(Shape in, int64_t size, int64_t stride, Layout in_layout, Layout out_layout)
      : in_(in), size_(size), stride_(stride), in_layout_(in_layout), out_layout_(out_layout) {
    out_ = {in.c, (in.h - size) / stride + 1, (in.w - size) / stride + 1};
  }
  std::string describe() const override {
    return "maxpool " + std::to_string(size_) + (stride_ != size_ ? " stride " + std::to_string(stride_) : "");
  }
  Shape input_shape() const override { return in_; }
  Shape output_shape() const override { return out_; }
  std::unique_ptr<LayerState> make_state() const override { return std::make_unique<PoolState>(); }

  void forward(std::span<const float>, const float* x, float* y, int64_t batch, bool train, Rng*,
               LayerState* state) override {
    Kernels& k = kernels(batch);
    dnnl::stream s(cpu_engine());
    k.src.set_data_handle(const_cast<float*>(x));
    memory& dst = k.dst.out(y);
    if (train) {
      auto* st = static_cast<PoolState*>(state);
      st->workspace.resize(k.ws_md.get_size());
      k.ws.set_data_handle(st->workspace.data());
      k.fwd_train.execute(s, {{DNNL_ARG_SRC, k.src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WORKSPACE, k.ws}});
    } else {
      k.fwd_infer.execute(s, {{DNNL_ARG_SRC, k.src}, {DNNL_ARG_DST, dst}});
    }
    k.dst.finish_out(s);
    s.wait();
  }

  void backward(std::span<const float>, std::span<float>, const float*, const float*, const float* dy, float* dx,
                int64_t batch, LayerState* state) override {
    if (dx == nullptr) return;
    Kernels& k = kernels(batch);
    dnnl::stream s(cpu_engine());
    auto* st = static_cast<PoolState*>(state);
    memory& ddst = k.ddst.in(dy, s);
    k.dsrc.set_data_handle(dx);
    k.ws.set_data_handle(st->workspace.data());
    k.bwd.execute(s, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_SRC, k.dsrc}, {DNNL_ARG_WORKSPACE, k.ws}});
    s.wait();
  }

 private:
  struct Kernels {
    dnnl::pooling_forward fwd_train, fwd_infer;
    dnnl::pooling_backward bwd;
    memory::desc ws_md;
    memory src, ws, dsrc;
    Port dst, ddst;
  };

  Kernels& kernels(int64_t batch) {
    auto it = cache_.find(batch);
    if (it != cache_.end()) return it->second;
    auto& eng = cpu_engine();
    // The pooling reads the input in the caller's layout and writes the layout it prefers for that
    // (the same one); a Port converts to the caller's output layout when that differs.
    const memory::desc src_md({batch, in_.c, in_.h, in_.w}, dt::f32, layout_tag(in_layout_));
    const memory::desc dst_user({batch, out_.c, out_.h, out_.w}, dt::f32, layout_tag(out_layout_));
    const memory::desc dst_any({batch, out_.c, out_.h, out_.w}, dt::f32, tag::any);
    const memory::dims strides = {stride_, stride_}, kernel = {size_, size_}, pad = {0, 0};
    Kernels k;
    const dnnl::pooling_forward::primitive_desc train_pd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, src_md, dst_any,
                                    strides, kernel, pad, pad),
        eng);
    const dnnl::pooling_forward::primitive_desc infer_pd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max, src_md,
                                    train_pd.dst_desc(), strides, kernel, pad, pad),
        eng);
    const dnnl::pooling_backward::primitive_desc bwd_pd(
        dnnl::pooling_backward::desc(dnnl::algorithm::pooling_max, src_md, train_pd.dst_desc(), strides, kernel, pad,
                                     pad),
        eng, train_pd);
    k.fwd_train = dnnl::pooling_forward(train_pd);
    k.fwd_infer = dnnl::pooling_forward(infer_pd);
    k.bwd = dnnl::pooling_backward(bwd_pd);
    k.ws_md = train_pd.workspace_desc();
    k.src = memory(src_md, eng, DNNL_MEMORY_NONE);
    k.ws = memory(k.ws_md, eng, DNNL_MEMORY_NONE);
    k.dst = Port(dst_user, train_pd.dst_desc());
    k.ddst = Port(dst_user, bwd_pd.diff_dst_desc());
    k.dsrc = memory(src_md, eng, DNNL_MEMORY_NONE);
    return cache_.emplace(batch, std::move(k)).first->second;
  }

  Shape in_, out_;
  int64_t size_, stride_;
  Layout in_layout_, out_layout_;
  std::map<int64_t, Kernels> cache_;
};

}  // namespace

std::unique_ptr<Layer> make_conv_layer(Shape in, int64_t filters, int64_t kernel, int64_t stride, bool same_padding,
                                       LayerActivation activation, Layout in_layout, Layout out_layout) {
  return std::make_unique<ConvLayer>(in, filters, kernel, stride, same_padding, activation, in_layout, out_layout);
}

std::unique_ptr<Layer> make_maxpool_layer(Shape in, int64_t size, int64_t stride, Layout in_layout,
                                          Layout out_layout) {
  return std::make_unique<MaxPoolLayer>(in, size, stride, in_layout, out_layout);
}

}  // namespace hpctune::nn
