// A stand-in for libhpctune_gpu_cuda.so that runs the table's dense-network and packed-model entries
// on the host (plain loops over malloc'ed "device" memory), with the ABI header's semantics. Loaded
// through HPCTUNE_GPU_LIBRARY by test_gpu_packed_host, it lets the host-side code of GpuMlp and
// GpuPackedMlp (offsets, strides, the order of the calls) run on a machine without a GPU; it says
// nothing of the CUDA kernels, which test_gpu_packed checks on a GPU. Entries it does not need are
// left null (the loader does not call them) or fail with "not in the host stand-in".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpu/gpu_library_abi.h"

struct HpctuneGpuContext {
  int tf32 = 0;
};

namespace {

thread_local char g_error[256] = "";
int fail(const char* what) {
  std::snprintf(g_error, sizeof g_error, "%s: invalid argument (code -1)", what);
  return -1;
}
const char* last_error() { return g_error; }
int device_count(int32_t* count) {
  *count = 1;
  return 0;
}
int version(int32_t* v) {
  *v = 13000;
  return 0;
}
int device_properties(int32_t device, HpctuneGpuDeviceProps* out) {
  if (device != 0) return fail("device_properties: no such device");
  std::memset(out, 0, sizeof *out);
  std::snprintf(out->name, sizeof out->name, "host stand-in (tests/gpu_host_library.cpp)");
  out->compute_major = 9;
  return 0;
}
int context_create(int32_t device, HpctuneGpuContext** out) {
  *out = nullptr;
  if (device != 0) return fail("context_create: no such device");
  *out = new HpctuneGpuContext;
  return 0;
}
void context_destroy(HpctuneGpuContext* ctx) { delete ctx; }
int synchronize(HpctuneGpuContext*) { return 0; }
int alloc(HpctuneGpuContext*, size_t bytes, void** out) {
  *out = std::calloc(bytes == 0 ? 1 : bytes, 1);
  return *out == nullptr ? fail("alloc") : 0;
}
int release(HpctuneGpuContext*, void* p) {
  std::free(p);
  return 0;
}
int copy(HpctuneGpuContext*, void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return 0;
}
int fill_zero(HpctuneGpuContext*, void* p, size_t bytes) {
  std::memset(p, 0, bytes);
  return 0;
}
int set_tf32(HpctuneGpuContext* ctx, int32_t on) {
  ctx->tf32 = on;
  return 0;
}

void gemm_one(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
              float beta, float* c) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(ta ? a[p * m + i] : a[i * k + p]) * double(tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = float(alpha * s + (beta == 0.f ? 0.0 : double(beta) * c[i * n + j]));
    }
}
int gemm(HpctuneGpuContext*, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
         const float* b, float beta, float* c) {
  if (m <= 0 || n <= 0 || k <= 0) return fail("gemm: sizes");
  gemm_one(ta, tb, m, n, k, alpha, a, b, beta, c);
  return 0;
}
int bias_activation_forward(HpctuneGpuContext* ctx, float* y, const float* bias, int64_t rows, int64_t cols,
                            int32_t relu);
int relu_backward(HpctuneGpuContext*, const float* y, const float* dy, float* dz, int64_t count) {
  if (count <= 0) return fail("relu_backward: count");
  for (int64_t i = 0; i < count; ++i) dz[i] = y[i] > 0.f ? dy[i] : 0.f;
  return 0;
}
int bias_gradient(HpctuneGpuContext*, const float* dz, float* db, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return fail("bias_gradient: sizes");
  for (int64_t c = 0; c < cols; ++c) {
    float s = 0.f;
    for (int64_t r = 0; r < rows; ++r) s += dz[r * cols + c];
    db[c] += s;
  }
  return 0;
}
int bias_activation_forward(HpctuneGpuContext*, float* y, const float* bias, int64_t rows, int64_t cols, int32_t relu) {
  if (rows <= 0 || cols <= 0) return fail("bias_activation_forward: sizes");
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = y[i] + bias[i % cols];
    y[i] = relu && v < 0.f ? 0.f : v;
  }
  return 0;
}
void softmax_rows(const float* logits, const int32_t* labels, int64_t rows, int64_t classes, float grad_scale,
                  float* dlogits, float* loss, int32_t* correct) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    const float m = z[best];
    float s = 0.f;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(z[c] - m);
    const int label = labels[r];
    if (dlogits != nullptr)
      for (int64_t c = 0; c < classes; ++c)
        dlogits[r * classes + c] = grad_scale * (std::exp(z[c] - m) / s - (c == label ? 1.f : 0.f));
    *loss += std::log(s) + m - z[label];
    if (best == label) *correct += 1;
  }
}
int softmax_cross_entropy(HpctuneGpuContext*, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                          float grad_scale, float* dlogits, float* loss, int32_t* correct) {
  if (rows <= 0 || classes <= 0) return fail("softmax_cross_entropy: sizes");
  softmax_rows(logits, labels, rows, classes, grad_scale, dlogits, loss, correct);
  return 0;
}
void sgd(float* p, const float* g, float* v, int64_t count, float lr, float momentum, float wd, int32_t nesterov) {
  for (int64_t i = 0; i < count; ++i) {
    float gi = g[i] + wd * p[i];
    if (v == nullptr || momentum == 0.f) {
      p[i] -= lr * gi;
      continue;
    }
    float vi = momentum * v[i] + gi;
    v[i] = vi;
    p[i] -= lr * (nesterov ? gi + momentum * vi : vi);
  }
}
int sgd_update(HpctuneGpuContext*, float* p, const float* g, float* v, int64_t count, float lr, float momentum, float wd,
               int32_t nesterov) {
  if (count <= 0) return fail("sgd_update: count");
  if (momentum != 0.f && v == nullptr) return fail("sgd_update: momentum without a velocity buffer");
  sgd(p, g, v, count, lr, momentum, wd, nesterov);
  return 0;
}

// ---- packed models ----
bool models_ok(int64_t models) { return models >= 1 && models <= 4096; }
int gemm_strided_batched(HpctuneGpuContext*, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float* a, int64_t sa, const float* b, int64_t sb, float beta, float* c, int64_t sc,
                         int64_t count) {
  if (m <= 0 || n <= 0 || k <= 0 || !models_ok(count) || sa < 0 || sb < 0 || sc < 1)
    return fail("gemm_strided_batched: sizes, strides or pointers");
  for (int64_t i = 0; i < count; ++i) gemm_one(ta, tb, m, n, k, alpha, a + i * sa, b + i * sb, beta, c + i * sc);
  return 0;
}
int packed_bias_activation_forward(HpctuneGpuContext* ctx, float* y, const float* bias, int64_t bias_stride,
                                   int64_t models, int64_t rows, int64_t cols, int32_t relu) {
  if (!models_ok(models) || bias_stride < 0) return fail("packed_bias_activation_forward: sizes or pointers");
  for (int64_t i = 0; i < models; ++i)
    if (int rc = bias_activation_forward(ctx, y + i * rows * cols, bias + i * bias_stride, rows, cols, relu)) return rc;
  return 0;
}
int packed_bias_gradient(HpctuneGpuContext* ctx, const float* dz, float* db, int64_t db_stride, int64_t models,
                         int64_t rows, int64_t cols) {
  if (!models_ok(models) || db_stride < cols) return fail("packed_bias_gradient: sizes or pointers");
  for (int64_t i = 0; i < models; ++i) {
    std::memset(db + i * db_stride, 0, size_t(cols) * sizeof(float));
    if (int rc = bias_gradient(ctx, dz + i * rows * cols, db + i * db_stride, rows, cols)) return rc;
  }
  return 0;
}
int packed_softmax_cross_entropy(HpctuneGpuContext*, const float* logits, const int32_t* labels, int64_t labels_stride,
                                 int64_t models, int64_t rows, int64_t classes, float grad_scale, float* dlogits,
                                 float* loss, int32_t* correct) {
  if (!models_ok(models) || rows <= 0 || classes <= 0 || labels_stride < 0)
    return fail("packed_softmax_cross_entropy: sizes or pointers");
  for (int64_t i = 0; i < models; ++i)
    softmax_rows(logits + i * rows * classes, labels + i * labels_stride, rows, classes, grad_scale,
                 dlogits != nullptr ? dlogits + i * rows * classes : nullptr, loss + i, correct + i);
  return 0;
}
int packed_sgd_update(HpctuneGpuContext*, float* p, const float* g, float* v, int64_t stride, int64_t count,
                      int64_t models, const float* lr, const float* momentum, const float* wd, int32_t nesterov) {
  if (!models_ok(models) || count <= 0 || stride < count || v == nullptr || lr == nullptr || momentum == nullptr)
    return fail("packed_sgd_update: sizes or pointers");
  for (int64_t i = 0; i < models; ++i)
    sgd(p + i * stride, g + i * stride, v + i * stride, count, lr[i], momentum[i], wd != nullptr ? wd[i] : 0.f, nesterov);
  return 0;
}
int packed_gather(HpctuneGpuContext*, const float* images, const int32_t* labels, int64_t set_rows, int64_t features,
                  const int32_t* index, int64_t index_stride, int64_t models, int64_t rows, float* x, int32_t* y) {
  if (!models_ok(models) || rows <= 0 || features <= 0 || index_stride < 0) return fail("packed_gather: sizes");
  for (int64_t i = 0; i < models; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t j = index[i * index_stride + r];
      if (j < 0 || j >= set_rows) continue;
      std::memcpy(x + (i * rows + r) * features, images + j * features, size_t(features) * sizeof(float));
      y[i * rows + r] = labels[j];
    }
  return 0;
}

HpctuneGpuApi make_api() {
  HpctuneGpuApi api{};
  api.abi_version = HPCTUNE_GPU_ABI_VERSION;
  api.struct_size = sizeof(HpctuneGpuApi);
  api.last_error = last_error;
  api.device_count = device_count;
  api.driver_version = version;
  api.runtime_version = version;
  api.device_properties = device_properties;
  api.context_create = context_create;
  api.context_destroy = context_destroy;
  api.synchronize = synchronize;
  api.alloc = alloc;
  api.release = release;
  api.copy_to_device = copy;
  api.copy_to_host = copy;
  api.fill_zero = fill_zero;
  api.set_tf32 = set_tf32;
  api.gemm = gemm;
  api.bias_activation_forward = bias_activation_forward;
  api.relu_backward = relu_backward;
  api.bias_gradient = bias_gradient;
  api.softmax_cross_entropy = softmax_cross_entropy;
  api.sgd_update = sgd_update;
  api.gemm_strided_batched = gemm_strided_batched;
  api.packed_bias_activation_forward = packed_bias_activation_forward;
  api.packed_bias_gradient = packed_bias_gradient;
  api.packed_softmax_cross_entropy = packed_softmax_cross_entropy;
  api.packed_sgd_update = packed_sgd_update;
  api.packed_gather = packed_gather;
  return api;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const HpctuneGpuApi* hpctune_gpu_api(void) {
  static const HpctuneGpuApi api = make_api();
  return &api;
}
