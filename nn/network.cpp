// Network (network.h): layer specs, the parameter vector, passes over layer ranges, and the loss.
#include "nn/network.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "nn/layers.h"

namespace hpctune::nn {

// ---- layer specs ---------------------------------------------------------------------------------

namespace {

Error spec_error(size_t i, const std::string& field, const std::string& what) {
  return err(Errc::kInvalidArgument, "layers[" + std::to_string(i) + "]" + (field.empty() ? "" : "." + field) + ": " + what);
}

}  // namespace

std::vector<LayerSpec> default_cnn_layer_specs(double dropout) {
  std::vector<LayerSpec> specs;
  LayerSpec conv1{.kind = "conv", .filters = 32, .kernel = 5, .stride = 1, .padding = "same"};
  LayerSpec pool{.kind = "maxpool", .stride = 2, .size = 2};
  LayerSpec conv2{.kind = "conv", .filters = 64, .kernel = 5, .stride = 1, .padding = "same"};
  LayerSpec fc{.kind = "dense", .units = 1024};
  specs = {conv1, pool, conv2, pool, fc};
  if (dropout > 0.0) specs.push_back(LayerSpec{.kind = "dropout", .rate = dropout});
  return specs;
}

// ---- loss ----------------------------------------------------------------------------------------

BatchStats softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t batch, int64_t classes,
                                 float grad_scale, float* dlogits, float* probs) {
  BatchStats stats;
  stats.count = batch;
  for (int64_t i = 0; i < batch; ++i) {
    const float* z = logits + i * classes;
    int64_t best = 0;
    for (int64_t j = 1; j < classes; ++j)
      if (z[j] > z[best]) best = j;
    const float zmax = z[best];
    double sum = 0.0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(z[j] - zmax));
    const int32_t y = labels[i];
    stats.loss_sum += std::log(sum) - static_cast<double>(z[y] - zmax);
    if (best == y) ++stats.correct;
    if (dlogits != nullptr || probs != nullptr) {
      const double inv = 1.0 / sum;
      for (int64_t j = 0; j < classes; ++j) {
        const float p = static_cast<float>(std::exp(static_cast<double>(z[j] - zmax)) * inv);
        if (probs != nullptr) probs[i * classes + j] = p;
        if (dlogits != nullptr) dlogits[i * classes + j] = p * grad_scale;
      }
      if (dlogits != nullptr) dlogits[i * classes + y] -= grad_scale;
    }
  }
  return stats;
}

// ---- Network -------------------------------------------------------------------------------------

struct Network::Impl {
  Shape input;
  int64_t classes = 0;
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<size_t> offsets;  // per layer, plus the total at the end
  std::vector<ParamBlock> blocks;
  std::vector<float> params, own_grads;
  std::span<float> grads;        // own_grads, or storage given by use_gradient_storage()
  std::shared_ptr<void> grads_owner;
  // Scratch of backward(): two ping-pong input-gradient buffers, and the pass and loss gradient of
  // forward_backward()/evaluate().
  std::vector<float> delta_a, delta_b, dlogits;
  Pass pass;
  size_t frozen = 0;  // layers [0, frozen) are frozen (freeze())

  // offsets and blocks from the layers and the frozen count.
  void index_params() {
    offsets.clear();
    blocks.clear();
    size_t offset = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      offsets.push_back(offset);
      for (ParamBlock b : layers[i]->param_blocks()) {
        b.offset += offset;
        b.frozen = i < frozen;
        blocks.push_back(b);
      }
      offset += layers[i]->num_params();
    }
    offsets.push_back(offset);
  }
};

std::string Layer::kind() const {
  const std::string d = describe();
  return d.substr(0, d.find(' '));
}

Network::Network(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
Network::~Network() = default;

Result<Network> Network::create(Shape input, const std::vector<LayerSpec>& specs, int64_t classes) {
  if (input.c < 1 || input.h < 1 || input.w < 1) {
    return err(Errc::kInvalidArgument, "network: the input shape must be positive, got " + std::to_string(input.c) +
                                           "x" + std::to_string(input.h) + "x" + std::to_string(input.w));
  }
  if (classes < 2) return err(Errc::kInvalidArgument, "network: classes must be >= 2, got " + std::to_string(classes));
  auto impl = std::make_unique<Impl>();
  impl->input = input;
  impl->classes = classes;
  Shape shape = input;
  // Tensors between two oneDNN layers stay in the blocked layout (layers.h: Layout).
  auto is_dnnl = [&](size_t i) { return i < specs.size() && (specs[i].kind == "conv" || specs[i].kind == "maxpool"); };
  auto layout_between = [&](size_t producer, int64_t channels) {
    return is_dnnl(producer) && is_dnnl(producer + 1) && channels % blocked_layout_block() == 0 ? Layout::kBlocked
                                                                                               : Layout::kPlain;
  };
  constexpr int64_t kMaxDim = int64_t{1} << 28;  // keeps BLAS's int dimensions and products safe
  for (size_t i = 0; i < specs.size(); ++i) {
    const LayerSpec& s = specs[i];
    LayerActivation act = LayerActivation::kRelu;
    if (!parse_layer_activation(s.activation, act)) {
      return spec_error(i, "activation", "unknown activation '" + s.activation + "'");
    }
    std::unique_ptr<Layer> layer;
    if (s.kind == "dense") {
      if (s.units < 1 || s.units > kMaxDim) return spec_error(i, "units", "must be in [1, 2^28]");
      if (shape.size() * s.units > (int64_t{1} << 32)) return spec_error(i, "units", "the weight matrix is too large");
      layer = make_dense_layer(shape, s.units, act);
    } else if (s.kind == "conv") {
      const int64_t stride = s.stride == 0 ? 1 : s.stride;
      if (s.filters < 1) return spec_error(i, "filters", "must be >= 1");
      if (s.kernel < 1 || s.kernel % 2 == 0) return spec_error(i, "kernel", "must be odd and >= 1");
      if (stride < 1) return spec_error(i, "stride", "must be >= 1");
      if (s.padding != "same" && s.padding != "valid") return spec_error(i, "padding", "must be same or valid");
      if (shape.h == 1 && shape.w == 1 && i > 0 && specs[i - 1].kind == "dense") {
        return spec_error(i, "kind", "conv after a dense layer (dense outputs have no spatial extent)");
      }
      const bool same = s.padding == "same";
      if (s.kernel > shape.h || s.kernel > shape.w) {
        return spec_error(i, "kernel", "kernel " + std::to_string(s.kernel) + " is larger than the " +
                                           std::to_string(shape.h) + "x" + std::to_string(shape.w) + " input");
      }
      if (act != LayerActivation::kNone && act != LayerActivation::kRelu && act != LayerActivation::kTanh &&
          act != LayerActivation::kSigmoid) {
        return spec_error(i, "activation", "unsupported");
      }
      const Layout in_layout = i > 0 ? layout_between(i - 1, shape.c) : Layout::kPlain;
      layer = make_conv_layer(shape, s.filters, s.kernel, stride, same, act, in_layout, layout_between(i, s.filters));
    } else if (s.kind == "maxpool") {
      const int64_t stride = s.stride == 0 ? s.size : s.stride;
      if (s.size < 2) return spec_error(i, "size", "must be >= 2");
      if (stride < 1) return spec_error(i, "stride", "must be >= 1");
      if (s.size > shape.h || s.size > shape.w) {
        return spec_error(i, "size", "window " + std::to_string(s.size) + " is larger than the " +
                                         std::to_string(shape.h) + "x" + std::to_string(shape.w) + " input");
      }
      const Layout in_layout = i > 0 ? layout_between(i - 1, shape.c) : Layout::kPlain;
      layer = make_maxpool_layer(shape, s.size, stride, in_layout, layout_between(i, shape.c));
    } else if (s.kind == "dropout") {
      if (!(s.rate >= 0.0 && s.rate < 1.0)) return spec_error(i, "rate", "must be in [0, 1)");
      layer = make_dropout_layer(shape, s.rate);
    } else {
      return spec_error(i, "kind", "unknown kind '" + s.kind + "'");
    }
    shape = layer->output_shape();
    impl->layers.push_back(std::move(layer));
  }
  if (shape.size() * classes > (int64_t{1} << 32)) {
    return err(Errc::kInvalidArgument, "network: the output layer's weight matrix is too large");
  }
  impl->layers.push_back(make_dense_layer(shape, classes, LayerActivation::kNone));

  impl->index_params();
  impl->params.assign(impl->offsets.back(), 0.0f);
  impl->own_grads.assign(impl->offsets.back(), 0.0f);
  impl->grads = impl->own_grads;
  return Network(std::move(impl));
}

Shape Network::input_shape() const noexcept { return impl_->input; }
int64_t Network::classes() const noexcept { return impl_->classes; }
size_t Network::num_layers() const noexcept { return impl_->layers.size(); }
const Layer& Network::layer(size_t i) const { return *impl_->layers.at(i); }

std::string Network::describe() const {
  std::string out;
  for (size_t i = 0; i < impl_->layers.size(); ++i) {
    const Layer& l = *impl_->layers[i];
    const Shape o = l.output_shape();
    out += std::to_string(i) + ": " + l.describe() + " -> " + std::to_string(o.c) + "x" + std::to_string(o.h) + "x" +
           std::to_string(o.w) + ", " + std::to_string(l.num_params()) + " params\n";
  }
  return out;
}

size_t Network::num_params() const noexcept { return impl_->params.size(); }
std::span<float> Network::params() noexcept { return impl_->params; }
std::span<const float> Network::params() const noexcept { return impl_->params; }
std::span<float> Network::grads() noexcept { return impl_->grads; }
const std::vector<ParamBlock>& Network::blocks() const noexcept { return impl_->blocks; }

void Network::use_gradient_storage(std::span<float> storage, std::shared_ptr<void> owner) {
  Impl& m = *impl_;
  if (storage.empty()) {
    if (!m.grads_owner) return;  // already in its own memory
    m.own_grads.assign(m.grads.begin(), m.grads.end());
    m.grads = m.own_grads;
    m.grads_owner.reset();
    return;
  }
  if (storage.size() != m.params.size()) throw std::invalid_argument("Network::use_gradient_storage: wrong size");
  std::copy(m.grads.begin(), m.grads.end(), storage.begin());
  m.grads = storage;
  m.grads_owner = std::move(owner);
  m.own_grads = std::vector<float>();  // release the memory
}

std::pair<size_t, size_t> Network::param_range(size_t first, size_t last) const {
  if (first > last || last > impl_->layers.size()) throw std::out_of_range("Network::param_range");
  return {impl_->offsets[first], impl_->offsets[last] - impl_->offsets[first]};
}

void Network::init(Rng& rng) {
  for (size_t i = 0; i < impl_->layers.size(); ++i) {
    const size_t off = impl_->offsets[i], n = impl_->offsets[i + 1] - off;
    impl_->layers[i]->init(std::span<float>(impl_->params).subspan(off, n), rng);
  }
}

Status Network::freeze(size_t n) {
  if (n > impl_->layers.size()) {
    return err(Errc::kInvalidArgument, "network: cannot freeze " + std::to_string(n) + " layers of " +
                                           std::to_string(impl_->layers.size()));
  }
  impl_->frozen = n;
  impl_->index_params();
  return Status::Ok();
}

size_t Network::frozen_layers() const noexcept { return impl_->frozen; }

Status Network::replace_output_layer(int64_t classes, Rng& rng) {
  Impl& m = *impl_;
  if (classes < 2) return err(Errc::kInvalidArgument, "network: classes must be >= 2, got " + std::to_string(classes));
  if (m.grads_owner) {
    return err(Errc::kInvalidArgument,
               "network: cannot replace the output layer while the gradients live in external storage");
  }
  const Shape in = m.layers.back()->input_shape();
  if (in.size() * classes > (int64_t{1} << 32)) {
    return err(Errc::kInvalidArgument, "network: the output layer's weight matrix is too large");
  }
  const size_t keep = m.offsets[m.layers.size() - 1];  // parameters before the output layer
  m.layers.back() = make_dense_layer(in, classes, LayerActivation::kNone);
  m.classes = classes;
  m.index_params();
  m.params.resize(m.offsets.back());
  m.layers.back()->init(std::span<float>(m.params).subspan(keep), rng);
  m.own_grads.assign(m.params.size(), 0.0f);
  m.grads = m.own_grads;
  m.pass = Pass();  // its buffers were sized for the old output
  return Status::Ok();
}

void Network::zero_grads() noexcept { std::fill(impl_->grads.begin(), impl_->grads.end(), 0.0f); }

void Network::forward(size_t first, size_t last, const float* x, int64_t batch, bool train, Rng* rng, Pass& pass) {
  if (first > last || last > impl_->layers.size()) throw std::out_of_range("Network::forward: bad layer range");
  const size_t n = last - first;
  // A pass reused over another range gets fresh states (they are per layer kind).
  if (pass.first != first || pass.last != last || pass.states.size() != n) {
    pass.states.clear();
    for (size_t i = first; i < last; ++i) pass.states.push_back(impl_->layers[i]->make_state());
  }
  pass.first = first;
  pass.last = last;
  pass.batch = batch;
  pass.input = x;
  pass.outputs.resize(n);
  const float* in = x;
  for (size_t j = 0; j < n; ++j) {
    Layer& layer = *impl_->layers[first + j];
    std::vector<float>& out = pass.outputs[j];
    const size_t size = static_cast<size_t>(batch * layer.output_shape().size());
    if (out.size() < size) out.resize(size);
    const size_t off = impl_->offsets[first + j];
    layer.forward(std::span<const float>(impl_->params).subspan(off, impl_->offsets[first + j + 1] - off), in,
                  out.data(), batch, train, rng, pass.states[j].get());
    in = out.data();
  }
}

void Network::backward(const float* dy, float* dx, Pass& pass) {
  const size_t n = pass.last - pass.first;
  const int64_t batch = pass.batch;
  // Frozen layers need no parameter gradients and, being a prefix, nothing before them needs an
  // input gradient: unless the caller wants dx (a later pipeline stage), backward stops there.
  const size_t frozen_here = impl_->frozen > pass.first ? std::min(n, impl_->frozen - pass.first) : 0;
  const size_t stop = dx == nullptr ? frozen_here : 0;
  const float* delta = dy;
  for (size_t j = n; j-- > stop;) {
    const size_t li = pass.first + j;
    Layer& layer = *impl_->layers[li];
    const float* x = j == 0 ? pass.input : pass.outputs[j - 1].data();
    float* out = nullptr;
    if (j == stop) {
      out = dx;  // null when stopping at a frozen layer
    } else {
      const size_t size = static_cast<size_t>(batch * layer.input_shape().size());
      std::vector<float>& buf = delta == impl_->delta_a.data() ? impl_->delta_b : impl_->delta_a;
      if (buf.size() < size) buf.resize(size);
      out = buf.data();
    }
    const size_t off = impl_->offsets[li], np = impl_->offsets[li + 1] - off;
    layer.backward(std::span<const float>(impl_->params).subspan(off, np),
                   impl_->grads.subspan(off, np), x, pass.outputs[j].data(), delta, out, batch,
                   pass.states[j].get());
    delta = out;
  }
}

BatchStats Network::forward_backward(const float* x, const int32_t* labels, int64_t batch, float grad_scale,
                                     Rng& dropout_rng, bool accumulate) {
  if (!accumulate) zero_grads();
  Pass& pass = impl_->pass;
  forward(0, impl_->layers.size(), x, batch, true, &dropout_rng, pass);
  const size_t n = static_cast<size_t>(batch * impl_->classes);
  if (impl_->dlogits.size() < n) impl_->dlogits.resize(n);
  const BatchStats stats =
      softmax_cross_entropy(pass.output(), labels, batch, impl_->classes, grad_scale, impl_->dlogits.data(), nullptr);
  backward(impl_->dlogits.data(), nullptr, pass);
  return stats;
}

BatchStats Network::evaluate(const float* x, const int32_t* labels, int64_t batch, float* probs) {
  Pass& pass = impl_->pass;
  forward(0, impl_->layers.size(), x, batch, false, nullptr, pass);
  return softmax_cross_entropy(pass.output(), labels, batch, impl_->classes, 0.0f, nullptr, probs);
}

}  // namespace hpctune::nn
