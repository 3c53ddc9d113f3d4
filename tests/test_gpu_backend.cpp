// The CUDA library's kernels against nn/'s CPU reference, on a GPU (issue 23, acceptance 2 for the
// MLP's dense training step): cuBLAS GEMM in row-major terms, bias + ReLU, ReLU backward, the bias
// gradient, softmax cross-entropy, SGD with momentum, and one whole forward/backward/update of a
// two-layer MLP against nn::Network and nn::Optimizer, in fp32 within tolerance.
//
// Needs a GPU. Without one it runs nothing and exits 77, which ctest shows as skipped
// (SKIP_RETURN_CODE), printing why: "no CUDA device: cudaGetDeviceCount: ..." or "built without
// CUDA". A CUDA library that exists but does not load is a failure, not a skip.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "common/rng.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_context.h"
#include "gpu/gpu_mlp.h"
#include "nn/layers.h"
#include "nn/network.h"
#include "nn/optimizer.h"
#include "tests/gpu_test_main.h"

using namespace hpctune;
using namespace hpctune::gpu;

namespace {

std::optional<GpuLibrary> g_library;

const HpctuneGpuApi& api() { return g_library->api(); }

// One context on device 0 for a test case.
struct Context {
  HpctuneGpuContext* ctx = nullptr;
  Context() {
    int rc = api().context_create(0, &ctx);
    REQUIRE_MESSAGE(rc == 0, g_library->last_error());
  }
  ~Context() { api().context_destroy(ctx); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
};

// A device copy of a host vector; to_host() copies it back.
template <typename T>
struct DeviceVector {
  HpctuneGpuContext* ctx;
  size_t n;
  T* d = nullptr;
  DeviceVector(HpctuneGpuContext* c, const std::vector<T>& host) : ctx(c), n(host.size()) {
    void* p = nullptr;
    REQUIRE_MESSAGE(api().alloc(ctx, n * sizeof(T), &p) == 0, g_library->last_error());
    d = static_cast<T*>(p);
    REQUIRE_MESSAGE(api().copy_to_device(ctx, d, host.data(), n * sizeof(T)) == 0, g_library->last_error());
  }
  DeviceVector(HpctuneGpuContext* c, size_t count) : DeviceVector(c, std::vector<T>(count, T{})) {}
  ~DeviceVector() { api().release(ctx, d); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> out(n);
    REQUIRE_MESSAGE(api().copy_to_host(ctx, out.data(), d, n * sizeof(T)) == 0, g_library->last_error());
    return out;
  }
};

std::vector<float> random_vector(size_t n, Rng& rng, float scale = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>((rng.uniform() * 2.0 - 1.0) * scale);
  return v;
}

// |a - b| <= atol + rtol * |b| everywhere; reports the first index that is not.
void check_close(const std::vector<float>& gpu, const std::vector<float>& cpu, float rtol, float atol, const char* what) {
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!(std::fabs(gpu[i] - cpu[i]) <= atol + rtol * std::fabs(cpu[i]))) {
      FAIL_CHECK(what << "[" << i << "]: gpu " << gpu[i] << ", cpu " << cpu[i]);
      return;
    }
  }
}

void ok(int rc) { REQUIRE_MESSAGE(rc == 0, g_library->last_error()); }

}  // namespace

TEST_CASE("gemm in row-major terms, every transpose, against a reference loop") {
  Context c;
  Rng rng(1);
  const int64_t m = 37, n = 19, k = 53;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      auto a = random_vector(m * k, rng), b = random_vector(k * n, rng), c0 = random_vector(m * n, rng);
      std::vector<float> ref(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p)
            s += double(ta ? a[p * m + i] : a[i * k + p]) * double(tb ? b[j * k + p] : b[p * n + j]);
          ref[i * n + j] = float(0.5 * s + 0.25 * c0[i * n + j]);
        }
      DeviceVector<float> da(c.ctx, a), db(c.ctx, b), dc(c.ctx, c0);
      ok(api().gemm(c.ctx, ta, tb, m, n, k, 0.5f, da.d, db.d, 0.25f, dc.d));
      check_close(dc.to_host(), ref, 1e-5f, 1e-5f, "gemm");
    }
  // TF32 tensor cores (10-bit mantissas in the products): the same GEMM within TF32's rounding, and
  // back to strict fp32 after.
  Rng rng2(11);
  auto a = random_vector(m * k, rng2), b = random_vector(k * n, rng2);
  std::vector<float> ref(m * n, 0.f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(a[i * k + p]) * double(b[p * n + j]);
      ref[i * n + j] = float(s);
    }
  DeviceVector<float> da(c.ctx, a), db(c.ctx, b), dc(c.ctx, size_t(m * n));
  ok(api().set_tf32(c.ctx, 1));
  ok(api().gemm(c.ctx, 0, 0, m, n, k, 1.f, da.d, db.d, 0.f, dc.d));
  check_close(dc.to_host(), ref, 1e-2f, 2e-2f, "gemm (tf32)");
  ok(api().set_tf32(c.ctx, 0));
  ok(api().gemm(c.ctx, 0, 0, m, n, k, 1.f, da.d, db.d, 0.f, dc.d));
  check_close(dc.to_host(), ref, 1e-5f, 1e-5f, "gemm (fp32 again)");
}

TEST_CASE("bias + ReLU, ReLU backward and the bias gradient against nn/") {
  Context c;
  Rng rng(2);
  const int64_t rows = 300, cols = 77;
  auto y = random_vector(rows * cols, rng), bias = random_vector(cols, rng), dy = random_vector(rows * cols, rng);
  for (int relu = 0; relu < 2; ++relu) {
    std::vector<float> ref = y;
    for (int64_t i = 0; i < rows * cols; ++i) ref[i] = relu ? std::max(0.f, y[i] + bias[i % cols]) : y[i] + bias[i % cols];
    DeviceVector<float> dy_(c.ctx, y), dbias(c.ctx, bias);
    ok(api().bias_activation_forward(c.ctx, dy_.d, dbias.d, rows, cols, relu));
    check_close(dy_.to_host(), ref, 0, 1e-6f, "bias_activation_forward");
  }
  std::vector<float> dz_ref(rows * cols);
  nn::activation_backward(nn::LayerActivation::kRelu, y.data(), dy.data(), dz_ref.data(), y.size());
  DeviceVector<float> d_y(c.ctx, y), d_dy(c.ctx, dy), d_dz(c.ctx, size_t(rows * cols));
  ok(api().relu_backward(c.ctx, d_y.d, d_dy.d, d_dz.d, rows * cols));
  check_close(d_dz.to_host(), dz_ref, 0, 0, "relu_backward");

  std::vector<float> db_ref(cols, 1.0f);  // adds into what is there
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) db_ref[j] += dy[r * cols + j];
  DeviceVector<float> d_db(c.ctx, std::vector<float>(cols, 1.0f));
  ok(api().bias_gradient(c.ctx, d_dy.d, d_db.d, rows, cols));
  check_close(d_db.to_host(), db_ref, 1e-5f, 1e-4f, "bias_gradient");
}

TEST_CASE("softmax cross-entropy: loss, correct count and gradient as nn::softmax_cross_entropy") {
  Context c;
  Rng rng(3);
  for (int64_t classes : {2, 10, 37, 1000}) {
    const int64_t rows = 129;
    auto logits = random_vector(rows * classes, rng, 4.0f);
    std::vector<int32_t> labels(rows);
    for (auto& l : labels) l = static_cast<int32_t>(rng.uniform() * double(classes)) % int32_t(classes);
    std::vector<float> dref(rows * classes);
    const float scale = 1.0f / float(rows);
    nn::BatchStats ref = nn::softmax_cross_entropy(logits.data(), labels.data(), rows, classes, scale, dref.data(), nullptr);
    DeviceVector<float> d_logits(c.ctx, logits), d_grad(c.ctx, size_t(rows * classes)), d_loss(c.ctx, size_t(1));
    DeviceVector<int32_t> d_labels(c.ctx, labels), d_correct(c.ctx, size_t(1));
    ok(api().softmax_cross_entropy(c.ctx, d_logits.d, d_labels.d, rows, classes, scale, d_grad.d, d_loss.d, d_correct.d));
    CAPTURE(classes);
    check_close(d_grad.to_host(), dref, 1e-4f, 1e-6f, "dlogits");
    CHECK(d_loss.to_host()[0] == doctest::Approx(ref.loss_sum).epsilon(1e-5));
    CHECK(d_correct.to_host()[0] == ref.correct);
  }
}

TEST_CASE("SGD with momentum, weight decay and Nesterov as nn::Optimizer, over several steps") {
  Context c;
  for (bool nesterov : {false, true})
    for (double momentum : {0.0, 0.9}) {
      Rng rng(4);
      const size_t n = 5000;
      auto params = random_vector(n, rng);
      nn::OptimizerOptions o;
      o.momentum = momentum;
      o.nesterov = nesterov && momentum > 0;
      o.weight_decay = 1e-3;
      nn::Optimizer cpu(n, o);
      std::vector<nn::ParamBlock> blocks{{0, n, true, false, 1.0f}};
      std::vector<float> cpu_params = params;
      DeviceVector<float> d_params(c.ctx, params), d_velocity(c.ctx, n), d_grads(c.ctx, n);
      for (int step = 0; step < 3; ++step) {
        auto grads = random_vector(n, rng);
        cpu.step(cpu_params, grads, blocks, 0.05f);
        ok(api().copy_to_device(c.ctx, d_grads.d, grads.data(), n * sizeof(float)));
        ok(api().sgd_update(c.ctx, d_params.d, d_grads.d, d_velocity.d, n, 0.05f, float(o.momentum), float(o.weight_decay),
                            o.nesterov));
      }
      CAPTURE(momentum);
      CAPTURE(nesterov);
      check_close(d_params.to_host(), cpu_params, 1e-5f, 1e-6f, "params after 3 steps");
    }
}

TEST_CASE("Adam and AdamW as nn::Optimizer, over several steps") {
  Context c;
  for (auto kind : {nn::OptimizerKind::kAdam, nn::OptimizerKind::kAdamW}) {
    Rng rng(9);
    const size_t n = 3000;
    auto params = random_vector(n, rng);
    nn::OptimizerOptions o;
    o.kind = kind;
    o.weight_decay = 0.01;
    nn::Optimizer cpu(n, o);
    std::vector<nn::ParamBlock> blocks{{0, n, true, false, 1.0f}};
    std::vector<float> cpu_params = params;
    DeviceVector<float> d_params(c.ctx, params), d_m(c.ctx, n), d_v(c.ctx, n), d_grads(c.ctx, n);
    for (int64_t step = 1; step <= 3; ++step) {
      auto grads = random_vector(n, rng);
      cpu.step(cpu_params, grads, blocks, 0.01f);
      ok(api().copy_to_device(c.ctx, d_grads.d, grads.data(), n * sizeof(float)));
      ok(api().adam_update(c.ctx, d_params.d, d_grads.d, d_m.d, d_v.d, int64_t(n), 0.01f, float(o.beta1), float(o.beta2),
                           float(o.eps), float(o.weight_decay), kind == nn::OptimizerKind::kAdamW, step));
    }
    CAPTURE(nn::optimizer_kind_name(kind));
    check_close(d_params.to_host(), cpu_params, 1e-5f, 1e-6f, "params after 3 steps");
  }
}

TEST_CASE("one MLP training step on the GPU equals nn::Network's forward, backward and SGD step") {
  Context c;
  const int64_t batch = 64, in = 20, hidden = 32, classes = 10;
  std::vector<nn::LayerSpec> specs(1);
  specs[0].kind = "dense";
  specs[0].units = hidden;
  auto made = nn::Network::create(nn::Shape{in, 1, 1}, specs, classes);
  REQUIRE(made.ok());
  nn::Network net = std::move(made).value();
  Rng rng(5);
  net.init(rng);
  REQUIRE(net.num_params() == size_t(in * hidden + hidden + hidden * classes + classes));
  auto x = random_vector(batch * in, rng);
  std::vector<int32_t> labels(batch);
  for (auto& l : labels) l = static_cast<int32_t>(rng.uniform() * double(classes)) % int32_t(classes);
  std::vector<float> p0(net.params().begin(), net.params().end());

  // CPU reference.
  Rng dropout(6);
  nn::BatchStats ref = net.forward_backward(x.data(), labels.data(), batch, 1.0f / float(batch), dropout);
  std::vector<float> ref_grads(net.grads().begin(), net.grads().end());
  nn::OptimizerOptions o;
  o.momentum = 0.9;
  nn::Optimizer opt(net.num_params(), o);
  opt.step(net.params(), net.grads(), net.blocks(), 0.1f);
  std::vector<float> ref_params(net.params().begin(), net.params().end());

  // GPU: parameters and gradients in one vector each, in nn/'s layout (W1 [in, hidden], b1, W2, b2).
  DeviceVector<float> P(c.ctx, p0), G(c.ctx, p0.size()), V(c.ctx, p0.size());
  float *W1 = P.d, *b1 = W1 + in * hidden, *W2 = b1 + hidden, *b2 = W2 + hidden * classes;
  float *gW1 = G.d, *gb1 = gW1 + in * hidden, *gW2 = gb1 + hidden, *gb2 = gW2 + hidden * classes;
  DeviceVector<float> X(c.ctx, x), H(c.ctx, size_t(batch * hidden)), Z(c.ctx, size_t(batch * classes)),
      dZ(c.ctx, size_t(batch * classes)), dH(c.ctx, size_t(batch * hidden)), loss(c.ctx, size_t(1));
  DeviceVector<int32_t> Y(c.ctx, labels), correct(c.ctx, size_t(1));
  ok(api().gemm(c.ctx, 0, 0, batch, hidden, in, 1.f, X.d, W1, 0.f, H.d));
  ok(api().bias_activation_forward(c.ctx, H.d, b1, batch, hidden, 1));
  ok(api().gemm(c.ctx, 0, 0, batch, classes, hidden, 1.f, H.d, W2, 0.f, Z.d));
  ok(api().bias_activation_forward(c.ctx, Z.d, b2, batch, classes, 0));
  ok(api().softmax_cross_entropy(c.ctx, Z.d, Y.d, batch, classes, 1.0f / float(batch), dZ.d, loss.d, correct.d));
  ok(api().gemm(c.ctx, 1, 0, hidden, classes, batch, 1.f, H.d, dZ.d, 0.f, gW2));
  ok(api().bias_gradient(c.ctx, dZ.d, gb2, batch, classes));
  ok(api().gemm(c.ctx, 0, 1, batch, hidden, classes, 1.f, dZ.d, W2, 0.f, dH.d));
  ok(api().relu_backward(c.ctx, H.d, dH.d, dH.d, batch * hidden));
  ok(api().gemm(c.ctx, 1, 0, in, hidden, batch, 1.f, X.d, dH.d, 0.f, gW1));
  ok(api().bias_gradient(c.ctx, dH.d, gb1, batch, hidden));
  CHECK(loss.to_host()[0] == doctest::Approx(ref.loss_sum).epsilon(1e-5));
  CHECK(correct.to_host()[0] == ref.correct);
  check_close(G.to_host(), ref_grads, 1e-4f, 1e-6f, "gradients");
  // Biases do not decay; weight decay is 0 here, so one update over the whole vector is the same.
  ok(api().sgd_update(c.ctx, P.d, G.d, V.d, int64_t(p0.size()), 0.1f, 0.9f, 0.f, 0));
  check_close(P.to_host(), ref_params, 1e-5f, 1e-6f, "parameters after the step");
}

TEST_CASE("GpuMlp: three SGD steps of a 3-layer MLP equal nn::Network with nn::Optimizer (momentum, weight decay)") {
  auto made_ctx = GpuContext::create(*g_library, 0);
  REQUIRE_MESSAGE(made_ctx.ok(), (made_ctx.ok() ? std::string() : made_ctx.error().to_string()));
  GpuContext ctx = std::move(made_ctx).value();
  const std::vector<int64_t> sizes{20, 32, 16, 10};
  const int64_t batch = 48;
  std::vector<nn::LayerSpec> specs(2);
  specs[0].kind = specs[1].kind = "dense";
  specs[0].units = 32;
  specs[1].units = 16;
  auto made = nn::Network::create(nn::Shape{20, 1, 1}, specs, 10);
  REQUIRE(made.ok());
  nn::Network net = std::move(made).value();
  Rng rng(7);
  net.init(rng);
  REQUIRE(net.num_params() == GpuMlp::num_params(sizes));
  nn::OptimizerOptions o;
  o.momentum = 0.9;
  o.weight_decay = 1e-3;
  nn::Optimizer opt(net.num_params(), o);
  auto mlp = GpuMlp::create(ctx, sizes, batch, net.params(), GpuSgdOptions{0.9f, false, 1e-3f});
  REQUIRE_MESSAGE(mlp.ok(), (mlp.ok() ? std::string() : mlp.error().to_string()));
  nn::BatchStats cpu_stats;
  for (int step = 0; step < 3; ++step) {
    auto x = random_vector(batch * 20, rng);
    std::vector<int32_t> labels(batch);
    for (auto& l : labels) l = static_cast<int32_t>(rng.uniform() * 10.0) % 10;
    Rng dropout(8);
    cpu_stats += net.forward_backward(x.data(), labels.data(), batch, 1.0f / float(batch), dropout);
    opt.step(net.params(), net.grads(), net.blocks(), 0.05f);
    auto dx = ctx.upload(std::span<const float>(x));
    auto dy = ctx.upload(std::span<const int32_t>(labels));
    REQUIRE(dx.ok());
    REQUIRE(dy.ok());
    auto st = mlp->train_step(dx->as<float>(), dy->as<int32_t>(), batch, 0.05f);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? std::string() : st.error().to_string()));
    REQUIRE(ctx.synchronize().ok());
  }
  auto gpu_params = mlp->params();
  REQUIRE(gpu_params.ok());
  check_close(*gpu_params, std::vector<float>(net.params().begin(), net.params().end()), 1e-4f, 1e-6f,
              "parameters after 3 steps");
  auto stats = mlp->take_stats();
  REQUIRE(stats.ok());
  CHECK(stats->count == 3 * batch);
  CHECK(stats->correct == cpu_stats.correct);
  CHECK(stats->loss_sum == doctest::Approx(cpu_stats.loss_sum).epsilon(1e-4));
  // A batch larger than the one it was made for is refused, not overrun.
  CHECK(mlp->train_step(nullptr, nullptr, batch + 1, 0.05f).error().code() == Errc::kInvalidArgument);
}

int main(int argc, char** argv) {
  hpctune::testing::GpuTestSetup gpu = hpctune::testing::open_gpu_for_tests();
  if (gpu.exit_code >= 0) return gpu.exit_code;
  g_library = *gpu.library;
  doctest::Context context(argc, argv);
  return context.run();
}
