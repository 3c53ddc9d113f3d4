// GpuNetwork, GpuOptimizer and GpuDataset (gpu/gpu_network.h) against nn/'s CPU network and
// optimizer, on a GPU (issue 23, acceptance 2: the MLP and the CNN, forward and backward, equal the
// CPU's within tolerance in fp32): the MLP 784-64-32-10 (relu) and a tanh/sigmoid one, the default
// CNN and a small CNN with two conv + maxpool (valid padding, overlapping pooling); evaluate()'s
// probabilities; dropout's mask (fraction kept, exact scaling, same seed same mask, backward =
// mask); the optimizer's three kinds over mixed blocks (frozen, lr_scale, non-decaying, gaps) and
// its state; the deterministic mode (bit-identical CNN runs); TF32 and bf16 following fp32; the
// data set's gather; bad input refused with an error.
//
// Needs a GPU. Without one it runs nothing and exits 77 (ctest: skipped), printing why. Every
// comparison prints the worst index with both values, so one log says what differs.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_network.h"
#include "nn/layers.h"
#include "nn/network.h"
#include "nn/optimizer.h"
#include "tests/gpu_test_main.h"

using namespace hpctune;
using namespace hpctune::gpu;

namespace {

std::optional<GpuLibrary> g_library;

std::string text(const Status& s) { return s.ok() ? std::string() : s.error().to_string(); }
template <typename T>
std::string text(const Result<T>& r) {
  return r.ok() ? std::string() : r.error().to_string();
}

GpuContext make_context() {
  auto made = GpuContext::create(*g_library, 0);
  REQUIRE_MESSAGE(made.ok(), text(made));
  return std::move(made).value();
}

GpuActivation to_gpu_activation(const std::string& name) {
  if (name == "relu") return GpuActivation::kRelu;
  if (name == "tanh") return GpuActivation::kTanh;
  if (name == "sigmoid") return GpuActivation::kSigmoid;
  return GpuActivation::kNone;
}

// nn::Network's layers (made from `specs`, plus the output layer create() appends) as GpuLayerDesc:
// the test's own translation (the trainers have theirs).
std::vector<GpuLayerDesc> to_gpu_layers(const nn::Network& net, const std::vector<nn::LayerSpec>& specs) {
  REQUIRE(net.num_layers() == specs.size() + 1);
  std::vector<GpuLayerDesc> out;
  for (size_t i = 0; i < net.num_layers(); ++i) {
    const nn::Layer& layer = net.layer(i);
    GpuLayerDesc d;
    const nn::Shape in = layer.input_shape(), o = layer.output_shape();
    d.in_c = in.c, d.in_h = in.h, d.in_w = in.w;
    d.out_c = o.c, d.out_h = o.h, d.out_w = o.w;
    if (i == specs.size()) {  // the output layer
      d.kind = GpuLayerDesc::Kind::kDense;
      d.activation = GpuActivation::kNone;
    } else {
      const nn::LayerSpec& s = specs[i];
      if (s.kind == "dense") {
        d.kind = GpuLayerDesc::Kind::kDense;
        d.activation = to_gpu_activation(s.activation);
      } else if (s.kind == "conv") {
        d.kind = GpuLayerDesc::Kind::kConv;
        d.activation = to_gpu_activation(s.activation);
        d.kernel = s.kernel;
        d.stride = s.stride > 0 ? s.stride : 1;
        if (s.padding == "same") {  // nn/'s rule: total padding for ceil(H / stride), the low side gets half
          d.pad_top = std::max<int64_t>(0, (o.h - 1) * d.stride + d.kernel - in.h) / 2;
          d.pad_left = std::max<int64_t>(0, (o.w - 1) * d.stride + d.kernel - in.w) / 2;
        }
      } else if (s.kind == "maxpool") {
        d.kind = GpuLayerDesc::Kind::kMaxpool;
        d.kernel = s.size;
        d.stride = s.stride > 0 ? s.stride : s.size;
      } else {
        d.kind = GpuLayerDesc::Kind::kDropout;
        d.rate = s.rate;
      }
    }
    REQUIRE_MESSAGE(d.num_params() == layer.num_params(), "layer " << i << " " << layer.describe());
    out.push_back(d);
  }
  return out;
}

struct Model {
  std::vector<nn::LayerSpec> specs;
  nn::Network net;
  std::vector<GpuLayerDesc> layers;
};

Model make_model(nn::Shape input, std::vector<nn::LayerSpec> specs, int64_t classes, uint64_t seed) {
  auto made = nn::Network::create(input, specs, classes);
  REQUIRE_MESSAGE(made.ok(), text(made));
  nn::Network net = std::move(made).value();
  Rng rng(seed);
  net.init(rng);
  auto layers = to_gpu_layers(net, specs);
  return Model{std::move(specs), std::move(net), std::move(layers)};
}

nn::LayerSpec dense(int64_t units, const char* act = "relu") {
  nn::LayerSpec s;
  s.kind = "dense";
  s.units = units;
  s.activation = act;
  return s;
}
nn::LayerSpec conv(int64_t filters, int64_t kernel, const char* padding, const char* act, int64_t stride = 1) {
  nn::LayerSpec s;
  s.kind = "conv";
  s.filters = filters;
  s.kernel = kernel;
  s.padding = padding;
  s.activation = act;
  s.stride = stride;
  return s;
}
nn::LayerSpec maxpool(int64_t size, int64_t stride) {
  nn::LayerSpec s;
  s.kind = "maxpool";
  s.size = size;
  s.stride = stride;
  return s;
}
nn::LayerSpec dropout(double rate) {
  nn::LayerSpec s;
  s.kind = "dropout";
  s.rate = rate;
  return s;
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};
Batch random_batch(int64_t batch, int64_t features, int64_t classes, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.x.resize(size_t(batch * features));
  for (auto& v : b.x) v = float(rng.uniform());
  b.y.resize(size_t(batch));
  for (auto& l : b.y) l = int32_t(rng.uniform() * double(classes)) % int32_t(classes);
  return b;
}

std::vector<float> random_vector(size_t n, Rng& rng, float scale = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = float((rng.uniform() * 2.0 - 1.0) * scale);
  return v;
}

// |gpu - cpu| <= rtol * max|cpu| + atol everywhere; on failure prints the worst index, both values
// and the scale.
void check_scaled(const std::vector<float>& gpu, const std::vector<float>& cpu, double rtol, const std::string& what,
                  double atol = 0.0) {
  REQUIRE_MESSAGE(gpu.size() == cpu.size(), what << ": " << gpu.size() << " values vs " << cpu.size());
  double scale = 0.0;
  for (float v : cpu) scale = std::max(scale, double(std::fabs(v)));
  size_t worst = 0;
  double worst_diff = -1.0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double diff = std::fabs(double(gpu[i]) - double(cpu[i]));
    if (!(diff <= worst_diff) || std::isnan(diff)) {  // NaN counts as the worst
      worst_diff = std::isnan(diff) ? INFINITY : diff;
      worst = i;
    }
  }
  const double bound = rtol * scale + atol;
  MESSAGE(what << ": worst |gpu - cpu| " << worst_diff << " at [" << worst << "] (gpu " << gpu[worst] << ", cpu "
               << cpu[worst] << "), bound " << bound << " (max |cpu| " << scale << ")");
  CHECK_MESSAGE(worst_diff <= bound, what << ": [" << worst << "] gpu " << gpu[worst] << ", cpu " << cpu[worst]
                                          << ", |diff| " << worst_diff << " > " << bound);
}

// The offset of every layer's parameters, to name the block of a gradient in messages.
void check_gradients_by_layer(const Model& m, const std::vector<float>& gpu, const std::vector<float>& cpu,
                              double rtol) {
  size_t offset = 0;
  for (size_t i = 0; i < m.net.num_layers(); ++i) {
    const size_t n = m.net.layer(i).num_params();
    if (n == 0) continue;
    std::vector<float> g(gpu.begin() + long(offset), gpu.begin() + long(offset + n));
    std::vector<float> c(cpu.begin() + long(offset), cpu.begin() + long(offset + n));
    check_scaled(g, c, rtol, "gradients of layer " + std::to_string(i) + " (" + m.net.layer(i).describe() + ")");
    offset += n;
  }
}

// One forward/backward on the CPU and on the GPU from the same parameters and batch: loss sum,
// correct count and every gradient; then evaluate()'s probabilities.
void compare_with_cpu(Model& m, int64_t batch, uint64_t seed, double grad_rtol = 1e-3) {
  const nn::Shape in = m.net.input_shape();
  const int64_t classes = m.net.classes();
  Batch b = random_batch(batch, in.size(), classes, seed);
  std::vector<float> p0(m.net.params().begin(), m.net.params().end());
  Rng no_dropout(1);
  const float scale = 1.0f / float(batch);
  nn::BatchStats ref = m.net.forward_backward(b.x.data(), b.y.data(), batch, scale, no_dropout);
  std::vector<float> ref_grads(m.net.grads().begin(), m.net.grads().end());
  std::vector<float> ref_probs(size_t(batch * classes));
  nn::BatchStats ref_eval = m.net.evaluate(b.x.data(), b.y.data(), batch, ref_probs.data());

  GpuContext ctx = make_context();
  GpuNetworkOptions o;
  o.max_batch = batch;
  auto net = GpuNetwork::create(ctx, m.layers, classes, p0, o);
  REQUIRE_MESSAGE(net.ok(), text(net));
  auto dx = ctx.upload(std::span<const float>(b.x));
  auto dy = ctx.upload(std::span<const int32_t>(b.y));
  REQUIRE(dx.ok());
  REQUIRE(dy.ok());
  auto st = net->forward_backward(dx->as<float>(), dy->as<int32_t>(), batch, scale, 7, 0);
  REQUIRE_MESSAGE(st.ok(), text(st));
  auto stats = net->take_stats();
  REQUIRE_MESSAGE(stats.ok(), text(stats));
  MESSAGE("loss sum gpu " << stats->loss_sum << ", cpu " << ref.loss_sum << "; correct gpu " << stats->correct << ", cpu "
                          << ref.correct);
  CHECK(stats->count == batch);
  CHECK(stats->loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-4));
  CHECK(stats->correct == ref.correct);
  auto grads = net->grads();
  REQUIRE_MESSAGE(grads.ok(), text(grads));
  check_gradients_by_layer(m, *grads, ref_grads, grad_rtol);

  // accumulate: a second pass adds the same gradients (2x).
  st = net->forward_backward(dx->as<float>(), dy->as<int32_t>(), batch, scale, 7, 0, true);
  REQUIRE_MESSAGE(st.ok(), text(st));
  auto twice = net->grads();
  REQUIRE(twice.ok());
  std::vector<float> ref_twice(ref_grads);
  for (auto& v : ref_twice) v *= 2.0f;
  check_scaled(*twice, ref_twice, grad_rtol, "gradients after an accumulating second pass");
  (void)net->take_stats();

  auto dprobs = ctx.allocate(size_t(batch * classes) * sizeof(float));
  REQUIRE(dprobs.ok());
  st = net->evaluate(dx->as<float>(), dy->as<int32_t>(), batch, dprobs->as<float>());
  REQUIRE_MESSAGE(st.ok(), text(st));
  auto probs = dprobs->read<float>();
  REQUIRE(probs.ok());
  check_scaled(*probs, ref_probs, 1e-4, "evaluate() probabilities", 1e-6);
  auto eval_stats = net->take_stats();
  REQUIRE(eval_stats.ok());
  CHECK(eval_stats->loss_sum == doctest::Approx(ref_eval.loss_sum).epsilon(1e-4));
  CHECK(eval_stats->correct == ref_eval.correct);
  // Parameters came through unchanged.
  auto params = net->params();
  REQUIRE(params.ok());
  CHECK(*params == p0);
}

}  // namespace

TEST_CASE("MLP 784-64-32-10 relu: loss, correct count, every gradient and evaluate() as nn::Network") {
  Model m = make_model(nn::Shape{1, 28, 28}, {dense(64), dense(32)}, 10, 11);
  compare_with_cpu(m, 16, 12);
}

TEST_CASE("MLP with tanh and sigmoid layers and a rate-0 dropout as nn::Network") {
  Model m = make_model(nn::Shape{784, 1, 1}, {dense(48, "tanh"), dropout(0.0), dense(24, "sigmoid"), dense(16, "none")}, 10, 21);
  compare_with_cpu(m, 16, 22);
}

TEST_CASE("the default CNN (conv 5x5 32, pool, conv 5x5 64, pool, dense 1024) as nn::Network, fp32") {
  Model m = make_model(nn::Shape{1, 28, 28}, nn::default_cnn_layer_specs(), 10, 31);
  compare_with_cpu(m, 16, 32);
}

TEST_CASE("a small CNN: conv valid tanh, overlapping maxpool 3 stride 2, conv same sigmoid, maxpool 2, dense") {
  Model m = make_model(nn::Shape{1, 28, 28},
                       {conv(8, 3, "valid", "tanh"), maxpool(3, 2), conv(16, 3, "same", "sigmoid"), maxpool(2, 2), dense(32)},
                       10, 41);
  REQUIRE(m.layers[1].out_h == 12);  // (26 - 3) / 2 + 1
  compare_with_cpu(m, 16, 42);
}

namespace {

// Device memory to the host and back, as a host-staged pipeline moves activations and gradients.
std::vector<float> to_host(const GpuContext& ctx, const float* d, size_t n) {
  std::vector<float> out(n);
  REQUIRE(ctx.api().copy_to_host(ctx.raw(), out.data(), d, n * sizeof(float)) == 0);
  return out;
}
void to_device(const GpuContext& ctx, float* d, const std::vector<float>& host) {
  REQUIRE(ctx.api().copy_to_device(ctx.raw(), d, host.data(), host.size() * sizeof(float)) == 0);
}

struct PipelineRun {
  std::vector<float> grads;  // the stages' gradients in order: the whole network's
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  std::vector<float> probs;  // evaluation
};

// The network of m cut at `bounds` (layer indices, first 0, last the layer count) into stages on
// one context, GPipe over `micro` micro-batches: every micro-batch forward through the stages, then
// every one backward in reverse order; then an evaluation, forward only. What moves between stages
// goes through the host.
PipelineRun run_stages(const Model& m, const std::vector<size_t>& bounds, const Batch& b, int64_t batch, int64_t micro) {
  GpuContext ctx = make_context();
  const size_t S = bounds.size() - 1;
  const int64_t classes = m.net.classes();
  std::vector<GpuNetwork> stages;
  std::vector<DeviceBuffer> inputs(S);  // what enters stage s > 0: [batch, its input]
  for (size_t s = 0; s < S; ++s) {
    const auto [offset, count] = m.net.param_range(bounds[s], bounds[s + 1]);
    std::vector<GpuLayerDesc> layers(m.layers.begin() + long(bounds[s]), m.layers.begin() + long(bounds[s + 1]));
    GpuNetworkOptions o;
    o.max_batch = batch;
    o.first_stage = s == 0;
    o.last_stage = s == S - 1;
    auto made = GpuNetwork::create(ctx, layers, o.last_stage ? classes : 0,
                                   std::span<const float>(m.net.params().subspan(offset, count)), o);
    REQUIRE_MESSAGE(made.ok(), text(made));
    stages.push_back(std::move(made).value());
    if (s > 0) {
      auto buf = ctx.allocate(size_t(batch * stages[s].input_size()) * sizeof(float));
      REQUIRE(buf.ok());
      inputs[s] = std::move(buf).value();
    }
  }
  auto dx = ctx.upload(std::span<const float>(b.x));
  auto dy = ctx.upload(std::span<const int32_t>(b.y));
  REQUIRE(dx.ok());
  REQUIRE(dy.ok());
  auto input_of = [&](size_t s, int64_t p0) -> const float* {
    return s == 0 ? dx->as<float>() + p0 * stages[0].input_size() : inputs[s].as<float>() + p0 * stages[s].input_size();
  };
  auto rows = [&](int64_t k) { return std::pair<int64_t, int64_t>{batch * k / micro, batch * (k + 1) / micro}; };
  auto forward_all = [&](bool train) {
    for (int64_t k = 0; k < micro; ++k) {
      const auto [p0, p1] = rows(k);
      for (size_t s = 0; s < S; ++s) {
        auto out = stages[s].stage_forward(input_of(s, p0), p0, p1 - p0, train, 7, uint64_t(k));
        REQUIRE_MESSAGE(out.ok(), text(out));
        if (s + 1 < S) {
          const size_t n = size_t((p1 - p0) * stages[s].output_size());
          to_device(ctx, inputs[s + 1].as<float>() + p0 * stages[s + 1].input_size(), to_host(ctx, *out, n));
        }
      }
    }
  };
  for (auto& st : stages) REQUIRE(st.zero_grads().ok());
  forward_all(true);
  for (int64_t k = micro - 1; k >= 0; --k) {
    const auto [p0, p1] = rows(k);
    std::vector<float> delta;  // the input gradient of stage s + 1
    for (size_t s = S; s-- > 0;) {
      if (s == S - 1) {
        auto st = stages[s].stage_loss(dy->as<int32_t>() + p0, p0, p1 - p0, true, 1.0f / float(batch), nullptr);
        REQUIRE_MESSAGE(st.ok(), text(st));
      } else {
        to_device(ctx, stages[s].stage_delta(), delta);
      }
      auto din = stages[s].stage_backward(input_of(s, p0), p0, p1 - p0, 7, uint64_t(k));
      REQUIRE_MESSAGE(din.ok(), text(din));
      CHECK((*din == nullptr) == (s == 0));
      if (s > 0) delta = to_host(ctx, *din, size_t((p1 - p0) * stages[s].input_size()));
    }
  }
  PipelineRun out;
  for (size_t s = 0; s < S; ++s) {
    auto g = stages[s].grads();
    REQUIRE(g.ok());
    out.grads.insert(out.grads.end(), g->begin(), g->end());
    auto stats = stages[s].take_stats();
    REQUIRE(stats.ok());
    if (s + 1 < S) CHECK(stats->count == 0);  // only the last stage sees labels
    out.loss_sum += stats->loss_sum, out.correct += stats->correct, out.count += stats->count;
  }
  forward_all(false);
  auto dprobs = ctx.allocate(size_t(batch * classes) * sizeof(float));
  REQUIRE(dprobs.ok());
  for (int64_t k = 0; k < micro; ++k) {
    const auto [p0, p1] = rows(k);
    auto st = stages[S - 1].stage_loss(dy->as<int32_t>() + p0, p0, p1 - p0, false, 0.f, dprobs->as<float>() + p0 * classes);
    REQUIRE_MESSAGE(st.ok(), text(st));
  }
  out.probs = to_host(ctx, dprobs->as<float>(), size_t(batch * classes));
  (void)stages[S - 1].take_stats();
  // What a stage refuses: a loss before the last stage, rows past max_batch.
  if (S > 1) CHECK(stages[0].stage_loss(dy->as<int32_t>(), 0, 1, true, 1.f, nullptr).error().code() == Errc::kInvalidArgument);
  CHECK(stages[0].stage_forward(dx->as<float>(), batch - 1, 2, true, 7, 0).error().code() == Errc::kInvalidArgument);
  return out;
}

}  // namespace

TEST_CASE("pipeline stages: a CNN cut into 2 and 3 stages, GPipe over 3 micro-batches, equals nn::Network (loss, every gradient, probabilities)") {
  Model m = make_model({1, 8, 8}, {conv(4, 3, "same", "relu"), maxpool(2, 2), dense(16, "tanh")}, 10, 21);
  const int64_t batch = 12, classes = 10;
  Batch b = random_batch(batch, 64, classes, 5);
  Rng no_dropout(1);
  nn::BatchStats ref = m.net.forward_backward(b.x.data(), b.y.data(), batch, 1.0f / float(batch), no_dropout);
  std::vector<float> ref_grads(m.net.grads().begin(), m.net.grads().end());
  std::vector<float> ref_probs(size_t(batch * classes));
  (void)m.net.evaluate(b.x.data(), b.y.data(), batch, ref_probs.data());
  for (const std::vector<size_t>& bounds : {std::vector<size_t>{0, 2, 4}, std::vector<size_t>{0, 1, 3, 4}}) {
    CAPTURE(bounds.size() - 1);
    const PipelineRun run = run_stages(m, bounds, b, batch, 3);
    CHECK(run.count == batch);
    CHECK(run.loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-4));
    CHECK(run.correct == ref.correct);
    check_gradients_by_layer(m, run.grads, ref_grads, 1e-3);
    check_scaled(run.probs, ref_probs, 1e-4, "probabilities through the stages", 1e-6);
  }
}

TEST_CASE("dropout: fraction kept ~ 1 - rate, kept values scaled exactly, same seed same mask, backward = mask") {
  GpuContext ctx = make_context();
  const auto& api = ctx.api();
  const int64_t n = int64_t(1) << 20;
  for (double rate : {0.1, 0.3, 0.5}) {
    CAPTURE(rate);
    std::vector<float> ones(size_t(n), 1.0f);
    auto x = ctx.upload(std::span<const float>(ones));
    auto y1 = ctx.allocate(size_t(n) * sizeof(float)), y2 = ctx.allocate(size_t(n) * sizeof(float)),
         y3 = ctx.allocate(size_t(n) * sizeof(float));
    REQUIRE((x.ok() && y1.ok() && y2.ok() && y3.ok()));
    REQUIRE_MESSAGE(api.dropout_forward(ctx.raw(), x->as<float>(), y1->as<float>(), n, rate, 42, 7) == 0, api.last_error());
    REQUIRE_MESSAGE(api.dropout_forward(ctx.raw(), x->as<float>(), y2->as<float>(), n, rate, 42, 7) == 0, api.last_error());
    REQUIRE_MESSAGE(api.dropout_forward(ctx.raw(), x->as<float>(), y3->as<float>(), n, rate, 42, 8) == 0, api.last_error());
    auto m1 = y1->read<float>(), m2 = y2->read<float>(), m3 = y3->read<float>();
    REQUIRE((m1.ok() && m2.ok() && m3.ok()));
    const float scale = float(1.0 / (1.0 - rate));
    int64_t kept = 0, odd = 0, differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = (*m1)[size_t(i)];
      if (v == scale) ++kept;
      else if (v != 0.0f) ++odd;
      if ((*m3)[size_t(i)] != v) ++differ;
    }
    const double kept_fraction = double(kept) / double(n);
    MESSAGE("kept " << kept_fraction << " (expected " << 1 - rate << "), values neither 0 nor " << scale << ": " << odd
                    << ", differing from another offset's mask: " << double(differ) / double(n));
    CHECK(odd == 0);
    CHECK(std::fabs(kept_fraction - (1.0 - rate)) < 0.005);  // 5 sigma is about 0.0025 at 2^20
    CHECK(*m1 == *m2);                                        // same seed and offset: same mask
    CHECK(std::fabs(double(differ) / double(n) - 2 * rate * (1 - rate)) < 0.01);  // another offset: independent
    // Backward: dx = dy * mask, exactly; in place.
    Rng rng(5);
    auto dy_host = random_vector(size_t(n), rng);
    auto d = ctx.upload(std::span<const float>(dy_host));
    REQUIRE(d.ok());
    REQUIRE_MESSAGE(api.dropout_backward(ctx.raw(), d->as<float>(), d->as<float>(), n, rate, 42, 7) == 0, api.last_error());
    auto dx = d->read<float>();
    REQUIRE(dx.ok());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i)
      if ((*dx)[size_t(i)] != dy_host[size_t(i)] * (*m1)[size_t(i)]) ++wrong;
    CHECK(wrong == 0);
  }
  // A rate outside [0, 1) is refused.
  auto x = ctx.allocate(16 * sizeof(float));
  REQUIRE(x.ok());
  CHECK(api.dropout_forward(ctx.raw(), x->as<float>(), x->as<float>(), 4, 1.0, 1, 1) != 0);
  MESSAGE("rate 1: " << api.last_error());
}

TEST_CASE("dropout in a network: same seed and offset give the same gradients, another offset others") {
  Model m = make_model(nn::Shape{784, 1, 1}, {dense(128), dropout(0.5), dense(32)}, 10, 51);
  const int64_t batch = 32;
  Batch b = random_batch(batch, 784, 10, 52);
  GpuContext ctx = make_context();
  GpuNetworkOptions o;
  o.max_batch = batch;
  std::vector<float> p0(m.net.params().begin(), m.net.params().end());
  auto net = GpuNetwork::create(ctx, m.layers, 10, p0, o);
  REQUIRE_MESSAGE(net.ok(), text(net));
  auto dx = ctx.upload(std::span<const float>(b.x));
  auto dy = ctx.upload(std::span<const int32_t>(b.y));
  REQUIRE((dx.ok() && dy.ok()));
  auto grads_for = [&](uint64_t seed, uint64_t offset) {
    auto st = net->forward_backward(dx->as<float>(), dy->as<int32_t>(), batch, 1.0f / batch, seed, offset);
    REQUIRE_MESSAGE(st.ok(), text(st));
    auto g = net->grads();
    REQUIRE(g.ok());
    return *g;
  };
  auto a = grads_for(3, 10), b2 = grads_for(3, 10), c = grads_for(3, 11), d = grads_for(4, 10);
  CHECK(a == b2);
  CHECK(a != c);
  CHECK(a != d);
  // The hidden layer's weight gradient of a unit is zero exactly where its output was dropped for
  // every sample: about rate^batch of them, so none here; but the mean scale holds: the gradient of
  // the first layer's bias is nonzero for most units.
  const size_t bias_at = 784 * 128;
  int64_t nonzero = 0;
  for (size_t i = 0; i < 128; ++i) nonzero += a[bias_at + i] != 0.0f;
  CHECK(nonzero > 64);
}

namespace {

// Mixed blocks over 5000 parameters: a frozen block, one at lr_scale 0.1, one not decaying, gaps
// outside every block, and a decaying one at full rate.
std::vector<nn::ParamBlock> mixed_blocks() {
  return {{0, 1000, true, true, 1.0f},
          {1000, 1000, true, false, 0.1f},
          {2000, 500, false, false, 1.0f},
          {3000, 1500, true, false, 1.0f}};
}
std::vector<GpuParamBlock> to_gpu_blocks(const std::vector<nn::ParamBlock>& blocks) {
  std::vector<GpuParamBlock> out;
  for (const auto& b : blocks) out.push_back(GpuParamBlock{b.offset, b.size, b.decay, b.frozen, b.lr_scale});
  return out;
}

}  // namespace

TEST_CASE("GpuOptimizer: sgd (momentum, nesterov, wd), adam and adamw over mixed blocks equal nn::Optimizer, state too") {
  GpuContext ctx = make_context();
  const size_t n = 5000;
  const auto blocks = mixed_blocks();
  const auto gpu_blocks = to_gpu_blocks(blocks);
  struct Case {
    const char* name;
    nn::OptimizerOptions o;
  };
  std::vector<Case> cases;
  {
    nn::OptimizerOptions o;
    o.momentum = 0.9, o.nesterov = true, o.weight_decay = 1e-2;
    cases.push_back({"sgd momentum nesterov wd", o});
    o.nesterov = false;
    cases.push_back({"sgd momentum wd", o});
    o.momentum = 0.0;
    cases.push_back({"sgd wd", o});
    nn::OptimizerOptions a;
    a.kind = nn::OptimizerKind::kAdam, a.weight_decay = 1e-2;
    cases.push_back({"adam wd", a});
    a.kind = nn::OptimizerKind::kAdamW;
    cases.push_back({"adamw wd", a});
  }
  for (const auto& c : cases) {
    const std::string case_name = c.name;
    CAPTURE(case_name);
    Rng rng(61);
    auto p0 = random_vector(n, rng);
    nn::Optimizer cpu(n, c.o);
    std::vector<float> cpu_params = p0;
    GpuOptimizerOptions g;
    g.kind = c.o.kind == nn::OptimizerKind::kSgd    ? GpuOptimizerOptions::Kind::kSgd
             : c.o.kind == nn::OptimizerKind::kAdam ? GpuOptimizerOptions::Kind::kAdam
                                                    : GpuOptimizerOptions::Kind::kAdamW;
    g.momentum = c.o.momentum, g.nesterov = c.o.nesterov, g.beta1 = c.o.beta1, g.beta2 = c.o.beta2, g.eps = c.o.eps;
    g.weight_decay = c.o.weight_decay;
    auto opt = GpuOptimizer::create(ctx, n, g);
    REQUIRE_MESSAGE(opt.ok(), text(opt));
    auto dp = ctx.upload(std::span<const float>(p0));
    auto dg = ctx.allocate(n * sizeof(float));
    REQUIRE((dp.ok() && dg.ok()));
    for (int step = 0; step < 3; ++step) {
      auto grads = random_vector(n, rng);
      cpu.step(cpu_params, grads, blocks, 0.05f);
      REQUIRE(dg->write(grads.data(), n * sizeof(float)).ok());
      auto st = opt->step(dp->as<float>(), dg->as<float>(), gpu_blocks, 0.05f);
      REQUIRE_MESSAGE(st.ok(), text(st));
    }
    CHECK(opt->steps() == cpu.steps());
    auto params = dp->read<float>();
    REQUIRE(params.ok());
    check_scaled(*params, cpu_params, 1e-6, std::string(c.name) + ": parameters after 3 steps");
    // The frozen block did not move at all.
    CHECK(std::equal(params->begin(), params->begin() + 1000, p0.begin()));
    const nn::OptimizerState state = cpu.state();
    auto buffers = opt->buffers();
    REQUIRE_MESSAGE(buffers.ok(), text(buffers));
    REQUIRE(buffers->size() == state.buffers.size());
    for (size_t i = 0; i < buffers->size(); ++i)
      check_scaled((*buffers)[i], state.buffers[i], 1e-6, std::string(c.name) + ": buffer " + std::to_string(i));

    // set_state round trip: the CPU's state into a fresh optimizer, then one more step on both.
    auto fresh = GpuOptimizer::create(ctx, n, g);
    REQUIRE(fresh.ok());
    auto st = fresh->set_state(state.steps, state.buffers);
    REQUIRE_MESSAGE(st.ok(), text(st));
    CHECK(fresh->steps() == state.steps);
    auto back = fresh->buffers();
    REQUIRE(back.ok());
    CHECK(*back == state.buffers);  // bit for bit
    REQUIRE(dp->write(cpu_params.data(), n * sizeof(float)).ok());
    auto grads = random_vector(n, rng);
    cpu.step(cpu_params, grads, blocks, 0.05f);
    REQUIRE(dg->write(grads.data(), n * sizeof(float)).ok());
    st = fresh->step(dp->as<float>(), dg->as<float>(), gpu_blocks, 0.05f);
    REQUIRE_MESSAGE(st.ok(), text(st));
    auto after = dp->read<float>();
    REQUIRE(after.ok());
    check_scaled(*after, cpu_params, 1e-6, std::string(c.name) + ": parameters after set_state and one more step");
    // A state of another shape is refused.
    std::vector<std::vector<float>> wrong(state.buffers.size() + 1, std::vector<float>(n));
    CHECK(fresh->set_state(1, wrong).error().code() == Errc::kInvalidArgument);
    if (!state.buffers.empty())
      CHECK(fresh->set_state(1, {std::vector<float>(n - 1)}).error().code() == Errc::kInvalidArgument);
  }
}

namespace {

// `steps` SGD (momentum) steps of a GpuNetwork over fixed batches; the final parameters and the
// loss of every step.
struct Run {
  std::vector<float> params;
  std::vector<double> losses;
};
Run train(const Model& m, const GpuNetworkOptions& o, int steps, int64_t batch, bool same_batch, float lr = 0.05f) {
  GpuContext ctx = make_context();
  std::vector<float> p0(m.net.params().begin(), m.net.params().end());
  auto net = GpuNetwork::create(ctx, m.layers, m.net.classes(), p0, o);
  REQUIRE_MESSAGE(net.ok(), text(net));
  GpuOptimizerOptions go;
  go.momentum = 0.9;
  go.weight_decay = 1e-4;
  auto opt = GpuOptimizer::create(ctx, net->num_params(), go);
  REQUIRE(opt.ok());
  std::vector<GpuParamBlock> blocks;
  for (const auto& b : m.net.blocks()) blocks.push_back(GpuParamBlock{b.offset, b.size, b.decay, b.frozen, b.lr_scale});
  Run run;
  for (int s = 0; s < steps; ++s) {
    Batch b = random_batch(batch, m.net.input_shape().size(), m.net.classes(), same_batch ? 1000 : 1000 + uint64_t(s));
    auto dx = ctx.upload(std::span<const float>(b.x));
    auto dy = ctx.upload(std::span<const int32_t>(b.y));
    REQUIRE((dx.ok() && dy.ok()));
    auto st = net->forward_backward(dx->as<float>(), dy->as<int32_t>(), batch, 1.0f / float(batch), 9, uint64_t(s));
    REQUIRE_MESSAGE(st.ok(), text(st));
    st = opt->step(net->d_params(), net->d_grads(), blocks, lr);
    REQUIRE_MESSAGE(st.ok(), text(st));
    auto stats = net->take_stats();
    REQUIRE_MESSAGE(stats.ok(), text(stats));
    run.losses.push_back(stats->loss_sum / double(batch));
  }
  auto params = net->params();
  REQUIRE(params.ok());
  run.params = *params;
  return run;
}

}  // namespace

TEST_CASE("deterministic mode: two runs of 5 CNN steps from the same parameters end bit-identical") {
  Model m = make_model(nn::Shape{1, 28, 28}, nn::default_cnn_layer_specs(0.25), 10, 71);
  GpuNetworkOptions o;
  o.max_batch = 16;
  o.deterministic = true;
  Run a = train(m, o, 5, 16, false, 0.01f), b = train(m, o, 5, 16, false, 0.01f);
  size_t differ = 0;
  for (size_t i = 0; i < a.params.size(); ++i) differ += std::memcmp(&a.params[i], &b.params[i], sizeof(float)) != 0;
  MESSAGE("losses " << a.losses.front() << " ... " << a.losses.back() << "; parameters differing: " << differ << " of "
                    << a.params.size());
  CHECK(differ == 0);
  // The runs trained: the parameters moved.
  std::vector<float> p0(m.net.params().begin(), m.net.params().end());
  CHECK(a.params != p0);
}

TEST_CASE("tf32 and bf16: 5 MLP steps follow fp32 within a loose tolerance and the loss decreases; the CNN too") {
  Model m = make_model(nn::Shape{1, 28, 28}, {dense(64), dense(32)}, 10, 81);
  GpuNetworkOptions o;
  o.max_batch = 64;
  Run fp32 = train(m, o, 5, 64, true);
  for (auto [precision, tol] : {std::pair{GpuPrecision::kTf32, 1e-2}, std::pair{GpuPrecision::kBf16, 2e-2}}) {
    const std::string precision_name = gpu_precision_name(precision);
    CAPTURE(precision_name);
    o.precision = precision;
    Run r = train(m, o, 5, 64, true);
    for (size_t s = 0; s < r.losses.size(); ++s) {
      MESSAGE("step " << s << ": loss " << precision_name << " " << r.losses[s] << ", fp32 " << fp32.losses[s]);
      CHECK(r.losses[s] == doctest::Approx(fp32.losses[s]).epsilon(tol));
    }
    CHECK(r.losses.back() < r.losses.front());
  }
  CHECK(fp32.losses.back() < fp32.losses.front());
  // The default CNN: convolutions in TF32 (under tf32 and bf16) against fp32.
  Model cnn = make_model(nn::Shape{1, 28, 28}, nn::default_cnn_layer_specs(), 10, 82);
  GpuNetworkOptions co;
  co.max_batch = 16;
  Run cnn32 = train(cnn, co, 3, 16, true, 0.002f);
  for (auto precision : {GpuPrecision::kTf32, GpuPrecision::kBf16}) {
    const std::string precision_name = gpu_precision_name(precision);
    CAPTURE(precision_name);
    co.precision = precision;
    Run r = train(cnn, co, 3, 16, true, 0.002f);
    for (size_t s = 0; s < r.losses.size(); ++s) {
      MESSAGE("CNN step " << s << ": loss " << precision_name << " " << r.losses[s] << ", fp32 " << cnn32.losses[s]);
      CHECK(r.losses[s] == doctest::Approx(cnn32.losses[s]).epsilon(2e-2));
    }
  }
}

TEST_CASE("GpuDataset: gather equals the host rows; bad indices and sizes are errors") {
  GpuContext ctx = make_context();
  const int64_t rows = 100, features = 784;
  Batch all = random_batch(rows, features, 10, 91);
  auto ds = GpuDataset::create(ctx, all.x, all.y, features, 8);
  REQUIRE_MESSAGE(ds.ok(), text(ds));
  CHECK(ds->rows() == rows);
  const std::vector<int64_t> pick{5, 99, 0, 5, 42};
  auto st = ds->gather(pick);
  REQUIRE_MESSAGE(st.ok(), text(st));
  std::vector<float> x(pick.size() * size_t(features));
  std::vector<int32_t> y(pick.size());
  REQUIRE(ctx.api().copy_to_host(ctx.raw(), x.data(), ds->batch_x(), x.size() * sizeof(float)) == 0);
  REQUIRE(ctx.api().copy_to_host(ctx.raw(), y.data(), ds->batch_labels(), y.size() * sizeof(int32_t)) == 0);
  for (size_t r = 0; r < pick.size(); ++r) {
    CAPTURE(r);
    CHECK(std::equal(x.begin() + long(r * features), x.begin() + long((r + 1) * features),
                     all.x.begin() + long(pick[r] * features)));
    CHECK(y[r] == all.y[size_t(pick[r])]);
  }
  auto out_of_range = ds->gather(std::vector<int64_t>{1, 100});
  REQUIRE(!out_of_range.ok());
  MESSAGE(out_of_range.error().to_string());
  CHECK(out_of_range.error().code() == Errc::kInvalidArgument);
  CHECK(ds->gather(std::vector<int64_t>{-1}).error().code() == Errc::kInvalidArgument);
  CHECK(ds->gather(std::vector<int64_t>(9, 0)).error().code() == Errc::kInvalidArgument);  // > max_batch
  CHECK(ds->gather(std::vector<int64_t>{}).error().code() == Errc::kInvalidArgument);
  CHECK(GpuDataset::create(ctx, all.x, std::span<const int32_t>(all.y).first(50), features, 8).error().code() ==
        Errc::kInvalidArgument);
}

TEST_CASE("GpuNetwork refuses bad input with an error: layers that do not chain, batch > max_batch, asymmetric padding") {
  GpuContext ctx = make_context();
  Model m = make_model(nn::Shape{1, 28, 28}, {dense(64), dense(32)}, 10, 101);
  std::vector<float> p(m.net.params().begin(), m.net.params().end());
  GpuNetworkOptions o;
  o.max_batch = 4;
  auto broken = m.layers;
  broken[1].in_c = 63;  // does not chain to the 64 outputs
  broken[1].out_c = 32;
  auto r = GpuNetwork::create(ctx, broken, 10, std::vector<float>(broken[0].num_params() + broken[1].num_params() +
                                                                    broken[2].num_params()),
                              o);
  REQUIRE(!r.ok());
  MESSAGE(r.error().to_string());
  CHECK(r.error().code() == Errc::kInvalidArgument);
  CHECK(GpuNetwork::create(ctx, m.layers, 10, std::span<const float>(p).first(p.size() - 1), o).error().code() ==
        Errc::kInvalidArgument);
  CHECK(GpuNetwork::create(ctx, m.layers, 11, p, o).error().code() == Errc::kInvalidArgument);
  auto net = GpuNetwork::create(ctx, m.layers, 10, p, o);
  REQUIRE_MESSAGE(net.ok(), text(net));
  Batch b = random_batch(5, 784, 10, 102);
  auto dx = ctx.upload(std::span<const float>(b.x));
  auto dy = ctx.upload(std::span<const int32_t>(b.y));
  REQUIRE((dx.ok() && dy.ok()));
  auto st = net->forward_backward(dx->as<float>(), dy->as<int32_t>(), 5, 0.2f, 1, 0);
  REQUIRE(!st.ok());
  MESSAGE(st.error().to_string());
  CHECK(st.error().code() == Errc::kInvalidArgument);
  CHECK(net->evaluate(dx->as<float>(), dy->as<int32_t>(), 0, nullptr).error().code() == Errc::kInvalidArgument);
  CHECK(net->set_params(std::vector<float>(3)).error().code() == Errc::kInvalidArgument);
  // nn/'s "same" with stride 2 on 28x28 and a 5x5 kernel pads 1 top-left, 2 bottom-right: refused.
  Model strided = make_model(nn::Shape{1, 28, 28}, {conv(4, 5, "same", "relu", 2)}, 10, 103);
  std::vector<float> sp(strided.net.params().begin(), strided.net.params().end());
  auto refused = GpuNetwork::create(ctx, strided.layers, 10, sp, o);
  REQUIRE(!refused.ok());
  MESSAGE(refused.error().to_string());
  CHECK(refused.error().code() == Errc::kUnavailable);
  CHECK(refused.error().message().find("asymmetric") != std::string::npos);
  // Stride 2 with symmetric padding (27x27, kernel 3: 1 each side) runs and matches the CPU.
  Model sym = make_model(nn::Shape{1, 27, 27}, {conv(4, 3, "same", "relu", 2)}, 10, 104);
  compare_with_cpu(sym, 8, 105);
}

int main(int argc, char** argv) {
  hpctune::testing::GpuTestSetup gpu = hpctune::testing::open_gpu_for_tests();
  if (gpu.exit_code >= 0) return gpu.exit_code;
  int64_t cudnn = 0;
  const bool have_cudnn = gpu.library->api().cudnn_version(&cudnn) == 0;
  std::printf("cuDNN %s\n", have_cudnn ? std::to_string(cudnn).c_str() : gpu.library->last_error().c_str());
  g_library = *gpu.library;
  doctest::Context context(argc, argv);
  return context.run();
}
