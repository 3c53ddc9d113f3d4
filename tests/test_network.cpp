// Network and its layers: gradients against finite differences for every layer kind, backward's
// accumulation, layer ranges, spec parsing, agreement with a naive dense reference, training a
// dense net on XOR, and determinism.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "common/rng.h"
#include "nn/blas.h"
#include "nn/layers.h"
#include "nn/network.h"
#include "nn/optimizer.h"

using namespace hpctune;
using namespace hpctune::nn;

namespace {

std::vector<float> random_vector(size_t n, Rng& rng, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal() * scale);
  return v;
}

// L = sum(r * layer(x; p)). Checks dL/dp (all of it, or an evenly spread sample) and dL/dx against
// central differences. Forward passes in training mode reseed the dropout Rng, so the mask is fixed.
void check_layer_gradients(Layer& layer, int64_t batch, uint64_t seed, double eps = 1e-3, double tol = 2e-2) {
  Rng rng(seed);
  const size_t nin = static_cast<size_t>(batch * layer.input_shape().size());
  const size_t nout = static_cast<size_t>(batch * layer.output_shape().size());
  std::vector<float> params(layer.num_params());
  layer.init(params, rng);
  for (auto& p : params) p += static_cast<float>(rng.normal() * 0.05);  // non-zero biases
  std::vector<float> x = random_vector(nin, rng);
  std::vector<float> r = random_vector(nout, rng);
  auto state = layer.make_state();

  auto loss = [&](const std::vector<float>& p, const std::vector<float>& xin) {
    std::vector<float> y(nout);
    Rng drop(seed + 1);
    layer.forward(p, xin.data(), y.data(), batch, true, &drop, state.get());
    double l = 0.0;
    for (size_t i = 0; i < nout; ++i) l += static_cast<double>(r[i]) * y[i];
    return l;
  };

  std::vector<float> y(nout);
  Rng drop(seed + 1);
  layer.forward(params, x.data(), y.data(), batch, true, &drop, state.get());
  std::vector<float> grads(params.size(), 0.0f), dx(nin, 0.0f);
  layer.backward(params, grads, x.data(), y.data(), r.data(), dx.data(), batch, state.get());

  auto compare = [&](double analytic, double numeric, const char* what, size_t i) {
    INFO(layer.describe() << " " << std::string(what) << "[" << i << "]: analytic " << analytic << " numeric " << numeric);
    CHECK(std::fabs(analytic - numeric) <= tol * std::max(1.0, std::fabs(numeric)));
  };
  const size_t step_p = std::max<size_t>(1, params.size() / 60);
  for (size_t i = 0; i < params.size(); i += step_p) {
    std::vector<float> p = params;
    p[i] = params[i] + static_cast<float>(eps);
    const double up = loss(p, x);
    p[i] = params[i] - static_cast<float>(eps);
    const double down = loss(p, x);
    compare(grads[i], (up - down) / (2 * eps), "dparam", i);
  }
  const size_t step_x = std::max<size_t>(1, nin / 60);
  for (size_t i = 0; i < nin; i += step_x) {
    std::vector<float> xs = x;
    xs[i] = x[i] + static_cast<float>(eps);
    const double up = loss(params, xs);
    xs[i] = x[i] - static_cast<float>(eps);
    const double down = loss(params, xs);
    compare(dx[i], (up - down) / (2 * eps), "dx", i);
  }
  // The gradients are not all zero (the check above would pass vacuously for a dead layer).
  double norm = 0.0;
  for (float g : dx) norm += std::fabs(g);
  CHECK(norm > 0.0);
}

LayerSpec dense(int64_t units, std::string act = "relu") { return {.kind = "dense", .units = units, .activation = act}; }
LayerSpec conv(int64_t filters, int64_t kernel, std::string padding = "same", int64_t stride = 1) {
  return {.kind = "conv", .filters = filters, .kernel = kernel, .stride = stride, .padding = padding};
}
LayerSpec pool(int64_t size) { return {.kind = "maxpool", .stride = size, .size = size}; }

Network make_network(Shape in, const std::vector<LayerSpec>& specs, int64_t classes, uint64_t seed) {
  auto net = Network::create(in, specs, classes);
  REQUIRE(net.ok());
  Rng rng(seed);
  net->init(rng);
  return std::move(net).value();
}

}  // namespace

TEST_CASE("dense layers: gradients match finite differences for every activation") {
  dnnl_set_threads(1);
  for (LayerActivation a : {LayerActivation::kNone, LayerActivation::kRelu, LayerActivation::kTanh,
                            LayerActivation::kSigmoid}) {
    auto layer = make_dense_layer({3, 2, 2}, 7, a);
    CHECK(layer->num_params() == 12 * 7 + 7);
    check_layer_gradients(*layer, 5, 11);
  }
}

TEST_CASE("conv layers: gradients match finite differences (same, valid, stride, activations)") {
  dnnl_set_threads(1);
  SUBCASE("same 3x3 relu") {
    auto l = make_conv_layer({2, 6, 6}, 3, 3, 1, true, LayerActivation::kRelu);
    CHECK(l->output_shape() == Shape{3, 6, 6});
    check_layer_gradients(*l, 2, 21);
  }
  SUBCASE("valid 3x3 none") {
    auto l = make_conv_layer({2, 6, 5}, 4, 3, 1, false, LayerActivation::kNone);
    CHECK(l->output_shape() == Shape{4, 4, 3});
    check_layer_gradients(*l, 3, 22);
  }
  SUBCASE("same 5x5 stride 2 tanh") {
    auto l = make_conv_layer({1, 7, 7}, 3, 5, 2, true, LayerActivation::kTanh);
    CHECK(l->output_shape() == Shape{3, 4, 4});
    check_layer_gradients(*l, 2, 23);
  }
  SUBCASE("valid 3x3 stride 2 sigmoid") {
    auto l = make_conv_layer({3, 7, 7}, 2, 3, 2, false, LayerActivation::kSigmoid);
    CHECK(l->output_shape() == Shape{2, 3, 3});
    check_layer_gradients(*l, 2, 24);
  }
}

TEST_CASE("maxpool and dropout: gradients match finite differences") {
  dnnl_set_threads(1);
  auto p = make_maxpool_layer({3, 6, 6}, 2, 2);
  CHECK(p->output_shape() == Shape{3, 3, 3});
  check_layer_gradients(*p, 2, 31);
  auto p3 = make_maxpool_layer({2, 7, 7}, 3, 2);
  CHECK(p3->output_shape() == Shape{2, 3, 3});
  check_layer_gradients(*p3, 2, 32);
  auto d = make_dropout_layer({4, 3, 3}, 0.4);
  check_layer_gradients(*d, 3, 33);

  // The mask: about `rate` of the values zeroed, the rest scaled by 1 / (1 - rate).
  const size_t n = 4 * 3 * 3 * 200;
  std::vector<float> x(n, 1.0f), y(n);
  auto state = d->make_state();
  Rng rng(5);
  d->forward({}, x.data(), y.data(), 200, true, &rng, state.get());
  const auto zeros = std::count(y.begin(), y.end(), 0.0f);
  CHECK(std::fabs(static_cast<double>(zeros) / static_cast<double>(n) - 0.4) < 0.03);
  for (float v : y) CHECK((v == 0.0f || std::fabs(v - 1.0f / 0.6f) < 1e-6f));
  d->forward({}, x.data(), y.data(), 200, false, nullptr, state.get());
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 1.0f; }));
}

TEST_CASE("softmax cross-entropy: loss, accuracy, probabilities and gradient") {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f};
  const std::vector<int32_t> labels = {1, 0};
  std::vector<float> d(6), probs(6);
  const BatchStats s = softmax_cross_entropy(logits.data(), labels.data(), 2, 3, 0.5f, d.data(), probs.data());
  auto lse = [](double a, double b, double c) { return std::log(std::exp(a) + std::exp(b) + std::exp(c)); };
  const double expect = (lse(1, 2, 0.5) - 2.0) + (lse(-1, 0, 3) + 1.0);
  CHECK(s.loss_sum == doctest::Approx(expect).epsilon(1e-6));
  CHECK(s.correct == 1);
  CHECK(s.count == 2);
  CHECK(probs[0] + probs[1] + probs[2] == doctest::Approx(1.0).epsilon(1e-6));
  for (size_t i = 0; i < 6; ++i) {
    std::vector<float> up = logits, down = logits;
    up[i] += 1e-3f, down[i] -= 1e-3f;
    const double num = (softmax_cross_entropy(up.data(), labels.data(), 2, 3, 0, nullptr, nullptr).loss_sum -
                        softmax_cross_entropy(down.data(), labels.data(), 2, 3, 0, nullptr, nullptr).loss_sum) /
                       2e-3 * 0.5;
    CHECK(d[i] == doctest::Approx(num).epsilon(2e-3));
  }
}

TEST_CASE("network: backward accumulates, and forward_backward(accumulate) sums") {
  dnnl_set_threads(1);
  Network net = make_network({1, 8, 8}, {conv(4, 3), pool(2), dense(10)}, 3, 7);
  Rng rng(1);
  const std::vector<float> x = random_vector(4 * 64, rng);
  const std::vector<int32_t> labels = {0, 1, 2, 1};
  Rng drop(2);
  net.forward_backward(x.data(), labels.data(), 4, 0.25f, drop);
  const std::vector<float> once(net.grads().begin(), net.grads().end());
  net.forward_backward(x.data(), labels.data(), 4, 0.25f, drop, /*accumulate=*/true);
  double norm = 0.0;
  for (size_t i = 0; i < once.size(); ++i) {
    CHECK(net.grads()[i] == doctest::Approx(2.0 * once[i]).epsilon(1e-5).scale(1e-6));
    norm += std::fabs(once[i]);
  }
  CHECK(norm > 0.0);
  net.zero_grads();
  CHECK(std::all_of(net.grads().begin(), net.grads().end(), [](float g) { return g == 0.0f; }));

  // Two half-batches with grad_scale 1/4 each sum to the whole batch's gradient.
  net.forward_backward(x.data(), labels.data(), 2, 0.25f, drop);
  net.forward_backward(x.data() + 2 * 64, labels.data() + 2, 2, 0.25f, drop, true);
  for (size_t i = 0; i < once.size(); ++i) CHECK(net.grads()[i] == doctest::Approx(once[i]).epsilon(1e-4).scale(1e-6));
}

TEST_CASE("network: the whole network's gradient matches finite differences") {
  dnnl_set_threads(1);
  // 16 channels: the tensors between the oneDNN layers are in the blocked layout.
  Network net = make_network({2, 8, 8}, {conv(16, 3), pool(2), conv(16, 3, "valid"), dense(6, "tanh")}, 4, 9);
  Rng rng(3);
  const std::vector<float> x = random_vector(3 * 128, rng);
  const std::vector<int32_t> labels = {0, 3, 2};
  Rng drop(4);
  net.forward_backward(x.data(), labels.data(), 3, 1.0f, drop);
  const std::vector<float> grads(net.grads().begin(), net.grads().end());
  const std::vector<float> params(net.params().begin(), net.params().end());
  // A ReLU or a max-pool argmax that flips within +-eps makes the loss kinked there: such samples
  // (the one-sided differences disagree) are skipped, and must stay few.
  const double center = net.evaluate(x.data(), labels.data(), 3).loss_sum;
  int checked = 0, kinked = 0;
  for (size_t i = 0; i < params.size(); i += 13) {
    auto p = net.params();
    p[i] = params[i] + 1e-3f;
    const double up = net.evaluate(x.data(), labels.data(), 3).loss_sum;
    p[i] = params[i] - 1e-3f;
    const double down = net.evaluate(x.data(), labels.data(), 3).loss_sum;
    p[i] = params[i];
    const double right = (up - center) / 1e-3, left = (center - down) / 1e-3;
    if (std::fabs(right - left) > 2e-2 * std::max(1.0, std::fabs(right))) {
      ++kinked;
      continue;
    }
    ++checked;
    INFO("param " << i);
    CHECK(grads[i] == doctest::Approx((up - down) / 2e-3).epsilon(2e-2).scale(1.0));
  }
  CHECK(checked > 200);
  CHECK(kinked * 20 < checked);
}

TEST_CASE("network: forward and backward over [first, last) ranges compose to the whole") {
  dnnl_set_threads(1);
  // 16 channels: splits 1, 2 and 3 fall on tensors in the blocked layout.
  Network net = make_network({1, 12, 12}, {conv(16, 5), pool(2), conv(16, 3), pool(2), dense(16), {.kind = "dropout", .rate = 0.3}},
                             5, 13);
  REQUIRE(net.num_layers() == 7);
  const int64_t batch = 6;
  Rng rng(8);
  const std::vector<float> x = random_vector(batch * 144, rng);
  const std::vector<float> dlogits = random_vector(batch * 5, rng);

  Network::Pass whole;
  Rng drop_a(99);
  net.zero_grads();
  net.forward(0, 7, x.data(), batch, true, &drop_a, whole);
  const std::vector<float> logits(whole.output(), whole.output() + batch * 5);
  std::vector<float> dx_whole(x.size());
  net.backward(dlogits.data(), dx_whole.data(), whole);
  const std::vector<float> grads_whole(net.grads().begin(), net.grads().end());

  for (size_t split : {1u, 2u, 3u, 5u, 6u}) {
    CAPTURE(split);
    Network::Pass a, b;
    Rng drop_b(99);
    net.zero_grads();
    net.forward(0, split, x.data(), batch, true, &drop_b, a);
    net.forward(split, 7, a.output(), batch, true, &drop_b, b);
    for (size_t i = 0; i < logits.size(); ++i) REQUIRE(b.output()[i] == logits[i]);
    const size_t mid = static_cast<size_t>(batch * net.layer(split).input_shape().size());
    std::vector<float> dmid(mid), dx(x.size());
    net.backward(dlogits.data(), dmid.data(), b);
    net.backward(dmid.data(), dx.data(), a);
    for (size_t i = 0; i < grads_whole.size(); ++i) REQUIRE(net.grads()[i] == grads_whole[i]);
    for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx[i] == dx_whole[i]);
    const auto [off, size] = net.param_range(0, split);
    CHECK(off == 0);
    CHECK(size + net.param_range(split, 7).second == net.num_params());
  }
}

TEST_CASE("network: the blocked layout between oneDNN layers gives the results of plain NCHW layers") {
  dnnl_set_threads(1);
  Network net = make_network({1, 10, 10}, {conv(16, 3), pool(2), conv(32, 3, "valid")}, 4, 21);
  const int64_t batch = 3;
  Rng rng(2);
  const std::vector<float> x = random_vector(batch * 100, rng);
  const std::vector<int32_t> labels = {0, 1, 3};
  Rng drop(1);
  net.forward_backward(x.data(), labels.data(), batch, 1.0f, drop);

  // The same layers, every tensor plain NCHW, run by hand.
  std::vector<std::unique_ptr<Layer>> plain;
  plain.push_back(make_conv_layer({1, 10, 10}, 16, 3, 1, true, LayerActivation::kRelu));
  plain.push_back(make_maxpool_layer({16, 10, 10}, 2, 2));
  plain.push_back(make_conv_layer({16, 5, 5}, 32, 3, 1, false, LayerActivation::kRelu));
  plain.push_back(make_dense_layer({32, 3, 3}, 4, LayerActivation::kNone));
  std::vector<std::vector<float>> acts = {x};
  std::vector<std::unique_ptr<LayerState>> states;
  for (size_t l = 0; l < plain.size(); ++l) {
    const auto [off, n] = net.param_range(l, l + 1);
    acts.emplace_back(static_cast<size_t>(batch * plain[l]->output_shape().size()));
    states.push_back(plain[l]->make_state());
    plain[l]->forward(net.params().subspan(off, n), acts[l].data(), acts[l + 1].data(), batch, true, nullptr,
                      states[l].get());
  }
  std::vector<float> dlogits(static_cast<size_t>(batch * 4));
  softmax_cross_entropy(acts.back().data(), labels.data(), batch, 4, 1.0f, dlogits.data(), nullptr);
  std::vector<float> grads(net.num_params(), 0.0f);
  std::vector<float> delta = dlogits;
  for (size_t l = plain.size(); l-- > 0;) {
    const auto [off, n] = net.param_range(l, l + 1);
    std::vector<float> dx(acts[l].size());
    plain[l]->backward(net.params().subspan(off, n), std::span<float>(grads).subspan(off, n), acts[l].data(),
                       acts[l + 1].data(), delta.data(), l > 0 ? dx.data() : nullptr, batch, states[l].get());
    delta = std::move(dx);
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    CHECK(net.grads()[i] == doctest::Approx(grads[i]).epsilon(1e-4).scale(1e-5));
  }
}

TEST_CASE("network: create checks shapes and appends the output layer") {
  auto ok = Network::create({1, 28, 28}, default_cnn_layer_specs(0.5), 10);
  REQUIRE(ok.ok());
  REQUIRE(ok->num_layers() == 7);
  CHECK(ok->layer(4).output_shape() == Shape{1024, 1, 1});
  CHECK(ok->layer(3).output_shape() == Shape{64, 7, 7});
  CHECK(ok->layer(6).describe() == "dense 10 none");
  CHECK(ok->num_params() == (32 * 25 + 32) + (64 * 32 * 25 + 64) + (3136 * 1024 + 1024) + (1024 * 10 + 10));
  CHECK(ok->blocks().size() == 8);
  CHECK(ok->blocks()[0].decay);
  CHECK_FALSE(ok->blocks()[1].decay);

  auto too_big = Network::create({1, 4, 4}, {conv(2, 5, "valid")}, 10);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.error().code() == Errc::kInvalidArgument);
  CHECK(too_big.error().message().find("layers[0].kernel") != std::string::npos);
  auto pool_big = Network::create({1, 6, 6}, {pool(2), pool(2), pool(2)}, 10);
  REQUIRE_FALSE(pool_big.ok());
  CHECK(pool_big.error().message().find("layers[2].size") != std::string::npos);
}

TEST_CASE("parse_layer_specs: values, defaults and errors naming layers[i].field") {
  auto specs = parse_layer_specs(nlohmann::json::parse(R"([
    {"kind": "conv", "filters": 32, "kernel": 5},
    {"kind": "maxpool", "size": 2},
    {"kind": "conv", "filters": 8, "kernel": 3, "stride": 2, "padding": "valid", "activation": "tanh"},
    {"kind": "dense", "units": 100},
    {"kind": "dropout", "rate": 0.5},
    {"kind": "dense", "units": 10, "activation": "sigmoid"}])"));
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == 6);
  CHECK((*specs)[0].stride == 1);
  CHECK((*specs)[0].padding == "same");
  CHECK((*specs)[0].activation == "relu");
  CHECK((*specs)[1].stride == 2);
  CHECK((*specs)[2].padding == "valid");
  CHECK((*specs)[2].activation == "tanh");
  CHECK((*specs)[3].units == 100);
  CHECK((*specs)[4].rate == 0.5);
  CHECK((*specs)[5].activation == "sigmoid");

  auto fails_at = [](const char* text, const char* where) {
    auto r = parse_layer_specs(nlohmann::json::parse(text));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    INFO(r.error().message());
    CHECK(r.error().message().rfind(where, 0) == 0);
  };
  fails_at(R"([{"kind": "dense", "units": 4}, {"kind": "conv", "filters": 3, "kernel": 4}])", "layers[1].kernel");
  fails_at(R"([{"kind": "conv", "kernel": 3}])", "layers[0].filters");
  fails_at(R"([{"kind": "dense", "units": 0}])", "layers[0].units");
  fails_at(R"([{"kind": "dense", "units": "many"}])", "layers[0].units");
  fails_at(R"([{"kind": "dense", "units": 3, "activation": "swish"}])", "layers[0].activation");
  fails_at(R"([{"kind": "dense", "units": 3}, {"kind": "lstm"}])", "layers[1].kind");
  fails_at(R"([{"units": 3}])", "layers[0].kind");
  fails_at(R"([{"kind": "maxpool", "size": 1}])", "layers[0].size");
  fails_at(R"([{"kind": "dropout", "rate": 1.0}])", "layers[0].rate");
  fails_at(R"([{"kind": "conv", "filters": 3, "kernel": 3, "padding": "full"}])", "layers[0].padding");
  fails_at(R"([{"kind": "dense", "units": 3, "filters": 2}])", "layers[0].filters");
  fails_at(R"([3])", "layers[0]");
  CHECK_FALSE(parse_layer_specs(nlohmann::json::object()).ok());
}

namespace {

// A dense classifier computed the plainest way, in double: for every layer y = act(x W + b) with W
// [in, out] row-major followed by b (the layout of layers.h), triple loops, then softmax
// cross-entropy and the backward pass by the chain rule. Independent of BLAS and of the layers.
struct NaiveDense {
  std::vector<double> logits;  // [batch, classes]
  double loss_sum = 0.0;
  int64_t correct = 0;
  std::vector<double> grads;  // grad_scale * d(loss_sum)/d(params), in the parameter layout
};

NaiveDense naive_dense(const std::vector<int64_t>& widths, const std::string& act, std::span<const float> params,
                       const std::vector<float>& x, const std::vector<int32_t>& labels, int64_t batch, double grad_scale) {
  const size_t layers = widths.size() - 1;
  std::vector<size_t> w_off(layers), b_off(layers);
  size_t off = 0;
  for (size_t l = 0; l < layers; ++l) {
    w_off[l] = off;
    off += static_cast<size_t>(widths[l] * widths[l + 1]);
    b_off[l] = off;
    off += static_cast<size_t>(widths[l + 1]);
  }
  REQUIRE(off == params.size());
  auto f = [&](double z) { return act == "relu" ? std::max(z, 0.0) : std::tanh(z); };
  // df/dz given a = f(z).
  auto df = [&](double a) { return act == "relu" ? (a > 0.0 ? 1.0 : 0.0) : 1.0 - a * a; };

  // acts[l]: the input of layer l, [batch, widths[l]]; acts[layers]: the logits.
  std::vector<std::vector<double>> acts(layers + 1);
  acts[0].assign(x.begin(), x.end());
  for (size_t l = 0; l < layers; ++l) {
    const int64_t in = widths[l], out = widths[l + 1];
    acts[l + 1].assign(static_cast<size_t>(batch * out), 0.0);
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t j = 0; j < out; ++j) {
        double z = params[b_off[l] + static_cast<size_t>(j)];
        for (int64_t k = 0; k < in; ++k) {
          z += acts[l][static_cast<size_t>(i * in + k)] * params[w_off[l] + static_cast<size_t>(k * out + j)];
        }
        acts[l + 1][static_cast<size_t>(i * out + j)] = l + 1 < layers ? f(z) : z;
      }
    }
  }

  NaiveDense r;
  r.logits = acts[layers];
  r.grads.assign(params.size(), 0.0);
  const int64_t classes = widths.back();
  std::vector<double> delta(static_cast<size_t>(batch * classes));
  for (int64_t i = 0; i < batch; ++i) {
    const double* z = r.logits.data() + i * classes;
    const int64_t argmax = std::max_element(z, z + classes) - z;
    const double zmax = z[argmax];
    double sum = 0.0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(z[j] - zmax);
    const int32_t y = labels[static_cast<size_t>(i)];
    r.loss_sum += std::log(sum) + zmax - z[y];
    r.correct += argmax == y ? 1 : 0;
    for (int64_t j = 0; j < classes; ++j) {
      delta[static_cast<size_t>(i * classes + j)] = grad_scale * (std::exp(z[j] - zmax) / sum - (j == y ? 1.0 : 0.0));
    }
  }
  for (size_t l = layers; l-- > 0;) {
    const int64_t in = widths[l], out = widths[l + 1];
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t j = 0; j < out; ++j) {
        const double d = delta[static_cast<size_t>(i * out + j)];
        r.grads[b_off[l] + static_cast<size_t>(j)] += d;
        for (int64_t k = 0; k < in; ++k) {
          r.grads[w_off[l] + static_cast<size_t>(k * out + j)] += acts[l][static_cast<size_t>(i * in + k)] * d;
        }
      }
    }
    if (l == 0) break;
    std::vector<double> below(static_cast<size_t>(batch * in), 0.0);
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t k = 0; k < in; ++k) {
        double s = 0.0;
        for (int64_t j = 0; j < out; ++j) {
          s += delta[static_cast<size_t>(i * out + j)] * params[w_off[l] + static_cast<size_t>(k * out + j)];
        }
        below[static_cast<size_t>(i * in + k)] = s * df(acts[l][static_cast<size_t>(i * in + k)]);
      }
    }
    delta = std::move(below);
  }
  return r;
}

}  // namespace

TEST_CASE("network of dense layers equals a naive triple-loop reference") {
  blas_set_threads(1);
  for (const std::string act : {"relu", "tanh"}) {
    CAPTURE(act);
    Network net = make_network({20, 1, 1}, {dense(16, act), dense(12, act)}, 5, 17);
    Rng rng(18);
    // Non-zero biases (init leaves them 0), so that the bias terms are checked too.
    for (float& p : net.params()) p += static_cast<float>(rng.normal() * 0.1);
    const int64_t batch = 9;
    const std::vector<float> x = random_vector(batch * 20, rng);
    std::vector<int32_t> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 5);
    const NaiveDense ref = naive_dense({20, 16, 12, 5}, act, net.params(), x, labels, batch, 1.0 / batch);

    Network::Pass pass;
    net.forward(0, net.num_layers(), x.data(), batch, false, nullptr, pass);
    for (int64_t i = 0; i < batch * 5; ++i) {
      CHECK(pass.output()[i] == doctest::Approx(ref.logits[static_cast<size_t>(i)]).epsilon(1e-5).scale(1e-4));
    }
    Rng drop(1);
    const BatchStats b = net.forward_backward(x.data(), labels.data(), batch, 1.0f / batch, drop);
    CHECK(b.loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-5));
    CHECK(b.correct == ref.correct);
    CHECK(b.count == batch);
    // float32 sums of a few dozen products: their rounding error is relative to the gradient's
    // overall scale, not to each (possibly cancelled, tiny) element.
    double largest = 0.0;
    for (double g : ref.grads) largest = std::max(largest, std::fabs(g));
    REQUIRE(largest > 1e-3);
    for (size_t i = 0; i < net.num_params(); ++i) {
      CAPTURE(i);
      CAPTURE(ref.grads[i]);
      CHECK(std::fabs(net.grads()[i] - ref.grads[i]) <= 1e-4 * std::fabs(ref.grads[i]) + 1e-5 * largest);
    }
  }
}

TEST_CASE("network of dense layers: parameter layout, blocks and bad sizes") {
  auto ok = Network::create({4, 1, 1}, {dense(3), {.kind = "dropout", .rate = 0.5}}, 2);
  REQUIRE(ok.ok());
  CHECK(ok->num_layers() == 3);
  CHECK(ok->num_params() == 4 * 3 + 3 + 3 * 2 + 2);
  REQUIRE(ok->blocks().size() == 4);
  CHECK(ok->blocks()[0].decay);
  CHECK(ok->blocks()[0].size == 12);
  CHECK_FALSE(ok->blocks()[1].decay);
  CHECK(ok->blocks()[2].offset == 15);
  CHECK(ok->blocks()[3].offset + ok->blocks()[3].size == ok->num_params());

  auto zero_units = Network::create({4, 1, 1}, {dense(3), dense(0)}, 2);
  REQUIRE_FALSE(zero_units.ok());
  CHECK(zero_units.error().code() == Errc::kInvalidArgument);
  CHECK(zero_units.error().message().find("layers[1].units") != std::string::npos);
  auto full_dropout = Network::create({4, 1, 1}, {dense(3), {.kind = "dropout", .rate = 1.0}}, 2);
  REQUIRE_FALSE(full_dropout.ok());
  CHECK(full_dropout.error().code() == Errc::kInvalidArgument);
  CHECK(full_dropout.error().message().find("layers[1].rate") != std::string::npos);
}

TEST_CASE("network of dense layers: SGD with momentum learns XOR, which a linear model cannot") {
  blas_set_threads(1);
  Network net = make_network({2, 1, 1}, {dense(16)}, 2, 5);
  Rng rng(5);
  // The label is the sign of x0 * x1.
  constexpr int64_t kN = 256;
  std::vector<float> x(kN * 2);
  std::vector<int32_t> y(kN);
  for (int64_t i = 0; i < kN; ++i) {
    x[static_cast<size_t>(2 * i)] = static_cast<float>(rng.uniform(-1, 1));
    x[static_cast<size_t>(2 * i + 1)] = static_cast<float>(rng.uniform(-1, 1));
    y[static_cast<size_t>(i)] = x[static_cast<size_t>(2 * i)] * x[static_cast<size_t>(2 * i + 1)] > 0 ? 1 : 0;
  }
  const BatchStats before = net.evaluate(x.data(), y.data(), kN);
  Optimizer sgd(net.num_params(), {.kind = OptimizerKind::kSgd, .momentum = 0.9});
  Rng drop(1);
  for (int step = 0; step < 300; ++step) {
    (void)net.forward_backward(x.data(), y.data(), kN, 1.0f / kN, drop);
    sgd.step(net.params(), net.grads(), net.blocks(), 0.1f);
  }
  const BatchStats after = net.evaluate(x.data(), y.data(), kN);
  MESSAGE("xor loss " << before.mean_loss() << " -> " << after.mean_loss() << ", accuracy " << after.accuracy());
  CHECK(after.mean_loss() < 0.5 * before.mean_loss());
  CHECK(after.accuracy() > 0.9);
}

TEST_CASE("network: results are bit-identical for a fixed thread count") {
  blas_set_threads(2);
  dnnl_set_threads(2);
  auto run = [] {
    Network net = make_network({1, 28, 28}, default_cnn_layer_specs(0.5), 10, 42);
    Rng rng(6);
    const std::vector<float> x = random_vector(32 * 784, rng);
    std::vector<int32_t> labels(32);
    for (int i = 0; i < 32; ++i) labels[static_cast<size_t>(i)] = i % 10;
    Rng drop(7);
    const BatchStats s = net.forward_backward(x.data(), labels.data(), 32, 1.0f / 32, drop);
    std::vector<float> out(net.grads().begin(), net.grads().end());
    out.push_back(static_cast<float>(s.loss_sum));
    return out;
  };
  const std::vector<float> a = run(), b = run();
  REQUIRE(a.size() == b.size());
  CHECK(std::equal(a.begin(), a.end(), b.begin()));
  blas_set_threads(1);
  dnnl_set_threads(1);
}
