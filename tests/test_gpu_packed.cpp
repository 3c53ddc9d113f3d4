// Packed models on a GPU (issue 23, packing): GpuPackedMlp trains k same-shape MLPs as one batched
// model (gpu/gpu_packed_mlp.h, kernels in gpu/cuda_packed.cu). Checked against k separate GpuMlp
// (gpu/gpu_mlp.h) runs: k = 3 models with their own initial parameters, learning rates and batches,
// 3 SGD-momentum steps, equal within fp32 tolerance (parameters, losses, correct counts); the
// shared-batch evaluation against nn::Network; GpuPackedDataset's gather against the host; bad input
// (k = 0, parameters or rates of the wrong count, a batch too large, indices outside the set).
//
// Needs a GPU (ctest test_gpu_packed). Without one it runs nothing and exits 77, which ctest shows
// as skipped (SKIP_RETURN_CODE), printing why. A CUDA library that exists but does not load is a
// failure. ctest test_gpu_packed_cpu_library runs the same cases on every machine against the CPU stand-in
// of the CUDA library (HPCTUNE_GPU_LIBRARY=tests/gpu_cpu_reference_library.cpp's module): that checks the
// host side (offsets, strides, the calls' order and arguments), not the CUDA kernels.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "common/rng.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_mlp.h"
#include "gpu/gpu_packed_mlp.h"
#include "nn/network.h"
#include "tests/gpu_test_main.h"

using namespace hpctune;
using namespace hpctune::gpu;

namespace {

std::optional<GpuLibrary> g_library;

GpuContext make_context() {
  auto ctx = GpuContext::create(*g_library, 0);
  REQUIRE_MESSAGE(ctx.ok(), (ctx.ok() ? "" : ctx.error().to_string()));
  return std::move(ctx).value();
}

template <typename T>
T value(Result<T> r, const char* what) {
  REQUIRE_MESSAGE(r.ok(), what << ": " << (r.ok() ? "" : r.error().to_string()));
  return std::move(r).value();
}
void ok(const Status& s, const char* what) { REQUIRE_MESSAGE(s.ok(), what << ": " << (s.ok() ? "" : s.error().to_string())); }

std::vector<float> random_vector(size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.uniform());
  return v;
}

// One model's initial parameters in nn::Network's layout (He init from its seed).
std::vector<float> init_params(const std::vector<int64_t>& sizes, uint64_t seed) {
  std::vector<nn::LayerSpec> specs;
  for (size_t l = 1; l + 1 < sizes.size(); ++l) specs.push_back({.kind = "dense", .units = sizes[l]});
  auto net = nn::Network::create(nn::Shape{sizes.front(), 1, 1}, specs, sizes.back());
  REQUIRE(net.ok());
  Rng rng(seed);
  net->init(rng);
  return std::vector<float>(net->params().begin(), net->params().end());
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, float rtol, float atol, const char* what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    worst = std::max(worst, d);
    if (!(d <= atol + rtol * std::fabs(want[i]))) {
      FAIL_CHECK(std::string(what) << "[" << i << "]: packed " << got[i] << ", separate " << want[i]);
      return;
    }
  }
  MESSAGE(std::string(what) << ": largest difference " << worst << " over " << got.size() << " values");
}

const std::vector<int64_t> kSizes = {40, 32, 24, 6};

}  // namespace

TEST_CASE("3 packed models with their own lr and batches equal 3 separate GpuMlp runs after 3 steps") {
  GpuContext ctx = make_context();
  const int64_t k = 3, batch = 16, steps = 3, in = kSizes.front(), classes = kSizes.back();
  const size_t np = GpuPackedMlp::num_params(kSizes);
  const std::vector<GpuPackedTrial> trials = {{0.05f, 0.9f, 0.f}, {0.1f, 0.5f, 0.f}, {0.02f, 0.0f, 0.f}};
  std::vector<float> all;
  std::vector<std::vector<float>> each;
  for (int64_t i = 0; i < k; ++i) {
    each.push_back(init_params(kSizes, 100 + uint64_t(i)));
    all.insert(all.end(), each.back().begin(), each.back().end());
  }
  // Per step: k different batches, model after model ([k, batch, in] and [k, batch]).
  Rng rng(7);
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int32_t>> ys;
  for (int64_t s = 0; s < steps; ++s) {
    xs.push_back(random_vector(size_t(k * batch * in), rng));
    std::vector<int32_t> y(size_t(k * batch));
    for (auto& v : y) v = int32_t(rng.next() % uint64_t(classes));
    ys.push_back(y);
  }
  auto packed = value(GpuPackedMlp::create(ctx, kSizes, batch, all, trials), "create packed");
  CHECK(packed.models() == k);
  CHECK(packed.params_per_model() == np);
  std::vector<GpuPackedStats> packed_stats;
  for (int64_t s = 0; s < steps; ++s) {
    auto dx = value(ctx.upload(std::span<const float>(xs[size_t(s)])), "upload x");
    auto dy = value(ctx.upload(std::span<const int32_t>(ys[size_t(s)])), "upload y");
    ok(packed.train_step(dx.as<float>(), dy.as<int32_t>(), batch), "packed train_step");
    packed_stats.push_back(value(packed.take_stats(), "packed stats"));
  }
  const std::vector<float> got = value(packed.params(), "packed params");
  REQUIRE(got.size() == np * size_t(k));

  for (int64_t i = 0; i < k; ++i) {
    CAPTURE(i);
    const auto& t = trials[size_t(i)];
    auto mlp = value(GpuMlp::create(ctx, kSizes, batch, each[size_t(i)], GpuSgdOptions{t.momentum, false, 0.f}),
                     "create GpuMlp");
    for (int64_t s = 0; s < steps; ++s) {
      auto dx = value(ctx.upload(std::span<const float>(xs[size_t(s)])), "upload x");
      auto dy = value(ctx.upload(std::span<const int32_t>(ys[size_t(s)])), "upload y");
      ok(mlp.train_step(dx.as<float>() + i * batch * in, dy.as<int32_t>() + i * batch, batch, t.lr), "GpuMlp step");
      auto st = value(mlp.take_stats(), "GpuMlp stats");
      const auto& ps = packed_stats[size_t(s)];
      CHECK(ps.count == batch);
      CHECK(ps.correct[size_t(i)] == st.correct);
      CHECK(std::fabs(ps.loss_sum[size_t(i)] - st.loss_sum) <= 1e-4 * (1 + std::fabs(st.loss_sum)));
    }
    const std::vector<float> want = value(mlp.params(), "GpuMlp params");
    const std::vector<float> slice(got.begin() + i * int64_t(np), got.begin() + (i + 1) * int64_t(np));
    check_close(slice, want, 1e-4f, 1e-5f, "model parameters after 3 steps");
    // The models really differ (their own lr, momentum and data moved them apart).
    if (i > 0) CHECK(slice != std::vector<float>(got.begin(), got.begin() + int64_t(np)));
  }
}

TEST_CASE("weight decay on the weights only, and set_learning_rates, as GpuMlp") {
  GpuContext ctx = make_context();
  const int64_t k = 2, batch = 8, in = kSizes.front(), classes = kSizes.back();
  const size_t np = GpuPackedMlp::num_params(kSizes);
  const std::vector<GpuPackedTrial> trials = {{0.05f, 0.9f, 1e-2f}, {0.03f, 0.9f, 0.f}};
  std::vector<float> all;
  std::vector<std::vector<float>> each;
  for (int64_t i = 0; i < k; ++i) {
    each.push_back(init_params(kSizes, 200 + uint64_t(i)));
    all.insert(all.end(), each.back().begin(), each.back().end());
  }
  Rng rng(9);
  auto x = random_vector(size_t(k * batch * in), rng);
  std::vector<int32_t> y(size_t(k * batch));
  for (auto& v : y) v = int32_t(rng.next() % uint64_t(classes));
  auto dx = value(ctx.upload(std::span<const float>(x)), "upload x");
  auto dy = value(ctx.upload(std::span<const int32_t>(y)), "upload y");
  auto packed = value(GpuPackedMlp::create(ctx, kSizes, batch, all, trials), "create packed");
  ok(packed.train_step(dx.as<float>(), dy.as<int32_t>(), batch), "step 1");
  const std::vector<float> second_lrs = {0.01f, 0.2f};
  ok(packed.set_learning_rates(second_lrs), "set_learning_rates");
  ok(packed.train_step(dx.as<float>(), dy.as<int32_t>(), batch), "step 2");
  const auto got = value(packed.params(), "packed params");
  for (int64_t i = 0; i < k; ++i) {
    CAPTURE(i);
    const auto& t = trials[size_t(i)];
    auto mlp = value(GpuMlp::create(ctx, kSizes, batch, each[size_t(i)], GpuSgdOptions{t.momentum, false, t.weight_decay}),
                     "create GpuMlp");
    ok(mlp.train_step(dx.as<float>() + i * batch * in, dy.as<int32_t>() + i * batch, batch, t.lr), "GpuMlp step 1");
    ok(mlp.train_step(dx.as<float>() + i * batch * in, dy.as<int32_t>() + i * batch, batch, second_lrs[size_t(i)]),
       "GpuMlp step 2");
    const std::vector<float> slice(got.begin() + i * int64_t(np), got.begin() + (i + 1) * int64_t(np));
    check_close(slice, value(mlp.params(), "GpuMlp params"), 1e-4f, 1e-5f, "parameters with decay / new lr");
  }
}

TEST_CASE("evaluate: every model on one shared batch, as nn::Network::evaluate") {
  GpuContext ctx = make_context();
  const int64_t k = 3, batch = 20, in = kSizes.front(), classes = kSizes.back();
  std::vector<float> all;
  std::vector<std::vector<float>> each;
  for (int64_t i = 0; i < k; ++i) {
    each.push_back(init_params(kSizes, 300 + uint64_t(i)));
    all.insert(all.end(), each.back().begin(), each.back().end());
  }
  Rng rng(5);
  auto x = random_vector(size_t(batch * in), rng);
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (auto& v : y) v = int32_t(rng.next() % uint64_t(classes));
  auto dx = value(ctx.upload(std::span<const float>(x)), "upload x");
  auto dy = value(ctx.upload(std::span<const int32_t>(y)), "upload y");
  auto packed = value(GpuPackedMlp::create(ctx, kSizes, batch, all, std::vector<GpuPackedTrial>(size_t(k))), "create");
  ok(packed.evaluate(dx.as<float>(), dy.as<int32_t>(), batch), "evaluate");
  auto st = value(packed.take_stats(), "stats");
  CHECK(st.count == batch);
  std::vector<nn::LayerSpec> specs = {{.kind = "dense", .units = kSizes[1]}, {.kind = "dense", .units = kSizes[2]}};
  for (int64_t i = 0; i < k; ++i) {
    CAPTURE(i);
    auto net = nn::Network::create(nn::Shape{in, 1, 1}, specs, classes);
    REQUIRE(net.ok());
    std::copy(each[size_t(i)].begin(), each[size_t(i)].end(), net->params().begin());
    nn::BatchStats cpu = net->evaluate(x.data(), y.data(), batch);
    CHECK(st.correct[size_t(i)] == cpu.correct);
    CHECK(std::fabs(st.loss_sum[size_t(i)] - cpu.loss_sum) <= 1e-4 * (1 + std::fabs(cpu.loss_sum)));
  }
}

TEST_CASE("GpuPackedDataset gathers each model's rows in its own order") {
  GpuContext ctx = make_context();
  const int64_t rows = 10, features = 5, k = 2, batch = 3, length = 6;
  std::vector<float> images(size_t(rows * features));
  for (size_t i = 0; i < images.size(); ++i) images[i] = float(i);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) labels[size_t(r)] = int32_t(100 + r);
  auto data = value(GpuPackedDataset::create(ctx, images, labels, features, k, batch), "create");
  const std::vector<int32_t> orders = {9, 8, 7, 6, 5, 4, /* model 1: */ 0, 2, 4, 6, 8, 1};
  ok(data.set_orders(orders, length), "set_orders");
  ok(data.gather(2, batch), "gather");
  std::vector<float> x(size_t(k * batch * features));
  std::vector<int32_t> y(size_t(k * batch));
  REQUIRE(ctx.api().copy_to_host(ctx.raw(), x.data(), data.batch_x(), x.size() * sizeof(float)) == 0);
  REQUIRE(ctx.api().copy_to_host(ctx.raw(), y.data(), data.batch_labels(), y.size() * sizeof(int32_t)) == 0);
  for (int64_t m = 0; m < k; ++m)
    for (int64_t r = 0; r < batch; ++r) {
      const int32_t j = orders[size_t(m * length + 2 + r)];
      CHECK(y[size_t(m * batch + r)] == 100 + j);
      for (int64_t f = 0; f < features; ++f) CHECK(x[size_t((m * batch + r) * features + f)] == float(j * features + f));
    }
  // Bad input: indices outside the set, the wrong count, a range past the orders' end, a batch too large.
  CHECK(data.set_orders(std::vector<int32_t>{0, 1, 2, 3, 4, 10, 0, 1, 2, 3, 4, 5}, length).error().code() ==
        Errc::kInvalidArgument);
  CHECK(data.set_orders(std::vector<int32_t>{0, 1, 2}, length).error().code() == Errc::kInvalidArgument);
  CHECK(data.gather(4, batch).error().code() == Errc::kInvalidArgument);
  CHECK(data.gather(0, batch + 1).error().code() == Errc::kInvalidArgument);
  CHECK(GpuPackedDataset::create(ctx, images, std::vector<int32_t>(3), features, k, batch).error().code() ==
        Errc::kInvalidArgument);
}

TEST_CASE("bad input: no models, mismatched parameter or rate counts, a batch too large") {
  GpuContext ctx = make_context();
  const size_t np = GpuPackedMlp::num_params(kSizes);
  std::vector<float> two(np * 2, 0.01f);
  auto none = GpuPackedMlp::create(ctx, kSizes, 8, {}, {});
  REQUIRE(!none.ok());
  CHECK(none.error().code() == Errc::kInvalidArgument);
  MESSAGE("k = 0: " << none.error().to_string());
  auto short_params = GpuPackedMlp::create(ctx, kSizes, 8, std::span<const float>(two.data(), np * 2 - 1),
                                           std::vector<GpuPackedTrial>(2));
  REQUIRE(!short_params.ok());
  CHECK(short_params.error().code() == Errc::kInvalidArgument);
  MESSAGE("params: " << short_params.error().to_string());
  CHECK(GpuPackedMlp::create(ctx, kSizes, 8, two, std::vector<GpuPackedTrial>(3)).error().code() ==
        Errc::kInvalidArgument);  // 3 trials, parameters for 2
  CHECK(GpuPackedMlp::create(ctx, {40}, 8, two, std::vector<GpuPackedTrial>(2)).error().code() == Errc::kInvalidArgument);
  CHECK(GpuPackedMlp::create(ctx, kSizes, 8, two, {{-0.1f, 0.f, 0.f}, {0.1f, 0.f, 0.f}}).error().code() ==
        Errc::kInvalidArgument);
  auto packed = value(GpuPackedMlp::create(ctx, kSizes, 8, two, std::vector<GpuPackedTrial>(2)), "create");
  DeviceBuffer dx = value(ctx.allocate(size_t(2 * 9 * kSizes[0]) * sizeof(float)), "alloc x");
  DeviceBuffer dy = value(ctx.allocate(size_t(2 * 9) * sizeof(int32_t)), "alloc y");
  CHECK(packed.train_step(dx.as<float>(), dy.as<int32_t>(), 9).error().code() == Errc::kInvalidArgument);
  CHECK(packed.train_step(dx.as<float>(), dy.as<int32_t>(), 0).error().code() == Errc::kInvalidArgument);
  CHECK(packed.evaluate(dx.as<float>(), dy.as<int32_t>(), 9).error().code() == Errc::kInvalidArgument);
  CHECK(packed.set_learning_rates(std::vector<float>{0.1f}).error().code() == Errc::kInvalidArgument);
  CHECK(packed.set_learning_rates(std::vector<float>{0.1f, NAN}).error().code() == Errc::kInvalidArgument);
  // The library's own checks: a strided GEMM with no models is refused with a message, not run.
  CHECK(ctx.api().gemm_strided_batched(ctx.raw(), 0, 0, 2, 2, 2, 1.f, dx.as<float>(), 4, dx.as<float>(), 4, 0.f,
                                       dx.as<float>(), 4, 0) != 0);
  MESSAGE("library: " << g_library->last_error());
}

int main(int argc, char** argv) {
  hpctune::testing::GpuTestSetup gpu = hpctune::testing::open_gpu_for_tests();
  if (gpu.exit_code >= 0) return gpu.exit_code;
  g_library = *gpu.library;
  doctest::Context context(argc, argv);
  return context.run();
}
