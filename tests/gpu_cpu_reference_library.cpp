// A CPU stand-in for libhpctune_gpu_cuda.so: the whole table of gpu/gpu_library_abi.h computed with
// plain loops on host memory ("device" pointers are malloc()ed), reporting one device named as what
// it is. test_gpu_network, test_gpu_trainer and test_gpu_packed run against it (ctest: *_cpu_library) so that everything
// above the table, GpuNetwork's layer walk, parameter offsets, ping-pong buffers, bf16 scratch,
// GpuOptimizer's block walk and state, GpuDataset, and the test's own translation of nn::Network,
// is checked against nn/ on every machine. It checks nothing of the CUDA kernels or cuDNN: those
// need a GPU (test_gpu_network without HPCTUNE_GPU_LIBRARY).
//
// Each entry follows the contract written at its declaration in gpu_library_abi.h, including the
// dropout hash, so the test's exact checks (masks, scaling) hold here as on the GPU. The NCCL
// entries are real, across processes and threads (gpu_cpu_reference_nccl.cpp).
//
// Devices: $HPCTUNE_CPU_REFERENCE_DEVICES stand-in devices (default 1, at most 16), numbered 0..n-1,
// each with its own PCI bus id "0000:0N:00.0"; CUDA_VISIBLE_DEVICES selects and renumbers them as
// CUDA does (the list up to its first id that is not a device; set but empty: none), so the ranks
// of a group that the launcher gives different devices see different bus ids, and ranks given one
// device see the same.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include "tests/gpu_cpu_reference_library.h"

namespace {

thread_local char g_error[512] = "";
int fail(const char* what) {
  std::snprintf(g_error, sizeof g_error, "%s: invalid argument (CPU reference library)", what);
  return -1;
}
const char* last_error() { return g_error; }

// The stand-in devices this process sees, as their numbers before CUDA_VISIBLE_DEVICES.
std::vector<int> visible_devices() {
  const char* n = std::getenv("HPCTUNE_CPU_REFERENCE_DEVICES");
  const int total = n != nullptr && *n != '\0' ? std::clamp(std::atoi(n), 1, 16) : 1;
  std::vector<int> out;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) {
    for (int d = 0; d < total; ++d) out.push_back(d);
    return out;
  }
  for (const char* p = visible; *p != '\0';) {
    char* end = nullptr;
    const long d = std::strtol(p, &end, 10);
    if (end == p || d < 0 || d >= total || std::find(out.begin(), out.end(), int(d)) != out.end()) break;
    out.push_back(int(d));
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') break;
  }
  return out;
}
std::string pci_bus_id_of(int physical) {
  char id[32];
  std::snprintf(id, sizeof id, "0000:%02X:00.0", physical + 1);
  return id;
}

int device_count(int32_t* count) {
  *count = int32_t(visible_devices().size());
  if (*count == 0)
    return cpu_reference::fail_with("cudaGetDeviceCount: no CUDA-capable device is detected (CPU stand-in: "
                                    "CUDA_VISIBLE_DEVICES names none of its devices)");
  return 0;
}
int driver_version(int32_t* v) { return *v = 13000, 0; }
int runtime_version(int32_t* v) { return *v = 13000, 0; }
int device_properties(int32_t device, HpctuneGpuDeviceProps* out) {
  const std::vector<int> devices = visible_devices();
  if (device < 0 || size_t(device) >= devices.size()) return fail("device_properties");
  std::memset(out, 0, sizeof *out);
  std::snprintf(out->name, sizeof out->name, "CPU reference library (tests/gpu_cpu_reference_library.cpp, not a GPU)");
  out->memory_bytes = uint64_t(1) << 30;
  out->compute_major = 9;
  out->multiprocessors = 1;
  std::snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "%s", pci_bus_id_of(devices[size_t(device)]).c_str());
  return 0;
}
int context_create(int32_t device, HpctuneGpuContext** out) {
  *out = nullptr;
  const std::vector<int> devices = visible_devices();
  if (device < 0 || size_t(device) >= devices.size()) return fail("context_create");
  *out = new HpctuneGpuContext;
  (*out)->device = device;
  (*out)->pci_bus_id = pci_bus_id_of(devices[size_t(device)]);
  return 0;
}
void context_destroy(HpctuneGpuContext* ctx) { delete ctx; }
int synchronize(HpctuneGpuContext*) { return 0; }
int alloc(HpctuneGpuContext*, size_t bytes, void** out) {
  *out = std::calloc(1, bytes == 0 ? 1 : bytes);
  return *out ? 0 : fail("alloc");
}
int release(HpctuneGpuContext*, void* p) { return std::free(p), 0; }
int copy_to_device(HpctuneGpuContext*, void* d, const void* s, size_t n) { return std::memcpy(d, s, n), 0; }
int copy_to_host(HpctuneGpuContext*, void* d, const void* s, size_t n) { return std::memcpy(d, s, n), 0; }
int fill_zero(HpctuneGpuContext*, void* p, size_t n) { return std::memset(p, 0, n), 0; }
int set_tf32(HpctuneGpuContext* ctx, int32_t on) { return ctx->tf32 = on, 0; }

template <typename GetA, typename GetB>
int gemm_any(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, float alpha, GetA a, GetB b, float beta, float* c) {
  if (m <= 0 || n <= 0 || k <= 0) return fail("gemm");
  // op(A) [m, k] and op(B) [k, n] made contiguous, then row by row in double.
  std::vector<float> A(size_t(m * k)), B(size_t(k * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) A[size_t(i * k + p)] = a(ta ? p * m + i : i * k + p);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j) B[size_t(p * n + j)] = b(tb ? j * k + p : p * n + j);
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double av = A[size_t(i * k + p)];
      const float* bp = B.data() + p * n;
      for (int64_t j = 0; j < n; ++j) row[size_t(j)] += av * double(bp[j]);
    }
    for (int64_t j = 0; j < n; ++j) c[i * n + j] = float(alpha * row[size_t(j)]) + (beta == 0.f ? 0.f : beta * c[i * n + j]);
  }
  return 0;
}
int gemm(HpctuneGpuContext*, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
         const float* b, float beta, float* c) {
  return gemm_any(ta, tb, m, n, k, alpha, [a](int64_t i) { return a[i]; }, [b](int64_t i) { return b[i]; }, beta, c);
}
float activate(float v, int act) {
  switch (act) {
    case HPCTUNE_ACT_RELU: return v < 0.f ? 0.f : v;
    case HPCTUNE_ACT_TANH: return std::tanh(v);
    case HPCTUNE_ACT_SIGMOID: return 1.0f / (1.0f + std::exp(-v));
    default: return v;
  }
}
int bias_activation_forward(HpctuneGpuContext*, float* y, const float* bias, int64_t rows, int64_t cols, int32_t relu) {
  for (int64_t i = 0; i < rows * cols; ++i) y[i] = activate(y[i] + bias[i % cols], relu ? HPCTUNE_ACT_RELU : 0);
  return 0;
}
int relu_backward(HpctuneGpuContext*, const float* y, const float* dy, float* dz, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dz[i] = y[i] > 0.f ? dy[i] : 0.f;
  return 0;
}
int bias_gradient(HpctuneGpuContext*, const float* dz, float* db, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    float s = 0.f;
    for (int64_t r = 0; r < rows; ++r) s += dz[r * cols + c];
    db[c] += s;
  }
  return 0;
}
int softmax_cross_entropy(HpctuneGpuContext*, const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                          float grad_scale, float* dlogits, float* loss, int32_t* correct) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (z[c] > z[best]) best = c;
    float s = 0.f;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(z[c] - z[best]);
    const int label = labels[r];
    const bool ok = label >= 0 && label < classes;
    if (dlogits)
      for (int64_t c = 0; c < classes; ++c)
        dlogits[r * classes + c] = grad_scale * (std::exp(z[c] - z[best]) / s - (c == label ? 1.f : 0.f));
    *loss += ok ? std::log(s) + z[best] - z[label] : NAN;
    if (best == label) ++*correct;
  }
  return 0;
}
int sgd_update(HpctuneGpuContext*, float* p, const float* grad, float* v, int64_t count, float lr, float mu, float wd,
               int32_t nesterov) {
  if (count <= 0 || (mu != 0.f && v == nullptr)) return fail("sgd_update");
  for (int64_t i = 0; i < count; ++i) {
    const float g = grad[i] + wd * p[i];
    if (mu == 0.f) {
      p[i] -= lr * g;
      continue;
    }
    v[i] = mu * v[i] + g;
    p[i] -= lr * (nesterov ? g + mu * v[i] : v[i]);
  }
  return 0;
}
int adam_update(HpctuneGpuContext*, float* p, const float* grad, float* m, float* v, int64_t count, float lr, float b1,
                float b2, float eps, float wd, int32_t decoupled, int64_t step) {
  if (count <= 0 || step < 1) return fail("adam_update");
  const double bc1 = 1.0 - std::pow(double(b1), double(step)), bc2 = 1.0 - std::pow(double(b2), double(step));
  const float step_size = float(double(lr) / bc1), sqrt_bc2 = float(std::sqrt(bc2)), shrink = 1.0f - lr * wd;
  for (int64_t i = 0; i < count; ++i) {
    float g = grad[i], pi = p[i];
    if (decoupled) pi *= shrink;
    else g += wd * pi;
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    p[i] = pi - step_size * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps);
  }
  return 0;
}
// ---- ABI 3 ----
int bias_activation_nchw(HpctuneGpuContext*, float* y, const float* bias, int64_t n, int64_t ch, int64_t sp, int32_t act) {
  if (n <= 0 || ch <= 0 || sp <= 0 || act < 0 || act > 3) return fail("bias_activation_nchw");
  for (int64_t i = 0; i < n * ch * sp; ++i) y[i] = activate(y[i] + (bias ? bias[(i / sp) % ch] : 0.f), act);
  return 0;
}
int activation_backward(HpctuneGpuContext*, const float* y, const float* dy, float* dz, int64_t count, int32_t act) {
  if (count <= 0 || act < 0 || act > 3) return fail("activation_backward");
  for (int64_t i = 0; i < count; ++i) {
    const float yi = y[i], g = dy[i];
    dz[i] = act == HPCTUNE_ACT_RELU      ? (yi > 0.f ? g : 0.f)
            : act == HPCTUNE_ACT_TANH    ? g * (1.0f - yi * yi)
            : act == HPCTUNE_ACT_SIGMOID ? g * (yi * (1.0f - yi))
                                         : g;
  }
  return 0;
}
int bias_gradient_nchw(HpctuneGpuContext*, const float* dz, float* db, int64_t n, int64_t ch, int64_t sp) {
  if (n <= 0 || ch <= 0 || sp <= 0) return fail("bias_gradient_nchw");
  for (int64_t c = 0; c < ch; ++c) {
    float s = 0.f;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < sp; ++k) s += dz[(i * ch + c) * sp + k];
    db[c] += s;
  }
  return 0;
}
int cudnn_version(int64_t* v) { return *v = 91900, 0; }
bool bad_conv(const HpctuneConvShape* s) {
  return s == nullptr || s->n <= 0 || s->pad < 0 || s->pad >= s->kernel ||
         s->out_h != (s->h + 2 * s->pad - s->kernel) / s->stride + 1 || s->out_w != (s->w + 2 * s->pad - s->kernel) / s->stride + 1;
}
// Calls f(x_index, w_index, y_index) for every in-bounds term of the convolution.
template <typename F>
void conv_terms(const HpctuneConvShape* s, F f) {
  for (int64_t n = 0; n < s->n; ++n)
    for (int64_t k = 0; k < s->filters; ++k)
      for (int64_t c = 0; c < s->c; ++c)
        for (int64_t ky = 0; ky < s->kernel; ++ky)
          for (int64_t kx = 0; kx < s->kernel; ++kx) {
            const int64_t wi = ((k * s->c + c) * s->kernel + ky) * s->kernel + kx;
            for (int64_t oy = 0; oy < s->out_h; ++oy) {
              const int64_t iy = oy * s->stride + ky - s->pad;
              if (iy < 0 || iy >= s->h) continue;
              const int64_t xrow = ((n * s->c + c) * s->h + iy) * s->w, yrow = ((n * s->filters + k) * s->out_h + oy) * s->out_w;
              for (int64_t ox = 0; ox < s->out_w; ++ox) {
                const int64_t ix = ox * s->stride + kx - s->pad;
                if (ix >= 0 && ix < s->w) f(xrow + ix, wi, yrow + ox);
              }
            }
          }
}
int conv_forward(HpctuneGpuContext*, const HpctuneConvShape* s, const float* x, const float* w, float* y) {
  if (bad_conv(s)) return fail("conv_forward");
  std::vector<double> acc(size_t(s->n * s->filters * s->out_h * s->out_w), 0.0);
  conv_terms(s, [&](int64_t xi, int64_t wi, int64_t yi) { acc[size_t(yi)] += double(x[xi]) * double(w[wi]); });
  for (size_t i = 0; i < acc.size(); ++i) y[i] = float(acc[i]);
  return 0;
}
int conv_backward_data(HpctuneGpuContext*, const HpctuneConvShape* s, const float* dy, const float* w, float* dx) {
  if (bad_conv(s)) return fail("conv_backward_data");
  std::vector<double> acc(size_t(s->n * s->c * s->h * s->w), 0.0);
  conv_terms(s, [&](int64_t xi, int64_t wi, int64_t yi) { acc[size_t(xi)] += double(dy[yi]) * double(w[wi]); });
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = float(acc[i]);
  return 0;
}
int conv_backward_filter(HpctuneGpuContext*, const HpctuneConvShape* s, const float* x, const float* dy, float* dw) {
  if (bad_conv(s)) return fail("conv_backward_filter");
  std::vector<double> acc(size_t(s->filters * s->c * s->kernel * s->kernel), 0.0);
  conv_terms(s, [&](int64_t xi, int64_t wi, int64_t yi) { acc[size_t(wi)] += double(x[xi]) * double(dy[yi]); });
  for (size_t i = 0; i < acc.size(); ++i) dw[i] += float(acc[i]);
  return 0;
}
int maxpool_forward(HpctuneGpuContext*, const float* x, float* y, int32_t* argmax, int64_t n, int64_t c, int64_t h,
                    int64_t w, int64_t size, int64_t stride) {
  if (size > h || size > w) return fail("maxpool_forward");
  const int64_t oh = (h - size) / stride + 1, ow = (w - size) / stride + 1;
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t best = oy * stride * w + ox * stride;
        for (int64_t ky = 0; ky < size; ++ky)
          for (int64_t kx = 0; kx < size; ++kx) {
            const int64_t at = (oy * stride + ky) * w + ox * stride + kx;
            if (x[p * h * w + at] > x[p * h * w + best]) best = at;
          }
        y[(p * oh + oy) * ow + ox] = x[p * h * w + best];
        if (argmax) argmax[(p * oh + oy) * ow + ox] = int32_t(best);
      }
  return 0;
}
int maxpool_backward(HpctuneGpuContext*, const float* dy, const int32_t* argmax, float* dx, int64_t n, int64_t c,
                     int64_t h, int64_t w, int64_t size, int64_t stride) {
  if (size > h || size > w || argmax == nullptr) return fail("maxpool_backward");
  const int64_t oh = (h - size) / stride + 1, ow = (w - size) / stride + 1;
  std::memset(dx, 0, size_t(n * c * h * w) * sizeof(float));
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t o = 0; o < oh * ow; ++o) dx[p * h * w + argmax[p * oh * ow + o]] += dy[p * oh * ow + o];
  return 0;
}
uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
int dropout_forward(HpctuneGpuContext*, const float* x, float* y, int64_t count, double rate, uint64_t seed, uint64_t offset) {
  if (count <= 0 || !(rate >= 0.0 && rate < 1.0)) return fail("dropout");
  const uint64_t key = splitmix64(seed ^ splitmix64(offset)), threshold = uint64_t(rate * 4294967296.0);
  const float scale = float(1.0 / (1.0 - rate));
  for (int64_t i = 0; i < count; ++i) y[i] = x[i] * ((splitmix64(key + uint64_t(i)) >> 32) < threshold ? 0.0f : scale);
  return 0;
}
int dropout_backward(HpctuneGpuContext* ctx, const float* dy, float* dx, int64_t count, double rate, uint64_t seed,
                     uint64_t offset) {
  return dropout_forward(ctx, dy, dx, count, rate, seed, offset);
}
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even (no NaN in these tests)
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
int f32_to_bf16(HpctuneGpuContext*, const float* src, uint16_t* dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = to_bf16(src[i]);
  return 0;
}
int gemm_bf16(HpctuneGpuContext*, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
              const uint16_t* b, float beta, float* c) {
  return gemm_any(ta, tb, m, n, k, alpha, [a](int64_t i) { return from_bf16(a[i]); },
                  [b](int64_t i) { return from_bf16(b[i]); }, beta, c);
}
int gather_rows(HpctuneGpuContext*, const float* src, const int32_t* src_labels, int64_t rows, int64_t features,
                const int64_t* index, int64_t count, float* dst, int32_t* dst_labels) {
  for (int64_t r = 0; r < count; ++r) {
    const bool ok = index[r] >= 0 && index[r] < rows;
    for (int64_t f = 0; f < features; ++f) dst[r * features + f] = ok ? src[index[r] * features + f] : 0.f;
    if (dst_labels) dst_labels[r] = ok ? src_labels[index[r]] : -1;
  }
  return 0;
}
int softmax(HpctuneGpuContext*, const float* logits, int64_t rows, int64_t classes, float* probs) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits + r * classes;
    float m = z[0], s = 0.f;
    for (int64_t c = 1; c < classes; ++c) m = std::fmax(m, z[c]);
    for (int64_t c = 0; c < classes; ++c) s += std::exp(z[c] - m);
    for (int64_t c = 0; c < classes; ++c) probs[r * classes + c] = std::exp(z[c] - m) / s;
  }
  return 0;
}

// ---- packed models (gpu/gpu_packed_mlp.h): each model's block through the entries above ----
bool models_ok(int64_t models) { return models >= 1 && models <= 4096; }
int gemm_strided_batched(HpctuneGpuContext* ctx, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float* a, int64_t sa, const float* b, int64_t sb, float beta, float* c, int64_t sc,
                         int64_t count) {
  if (m <= 0 || n <= 0 || k <= 0 || !models_ok(count) || sa < 0 || sb < 0 || sc < 1)
    return fail("gemm_strided_batched: sizes, strides or pointers");
  for (int64_t i = 0; i < count; ++i)
    if (int rc = gemm(ctx, ta, tb, m, n, k, alpha, a + i * sa, b + i * sb, beta, c + i * sc)) return rc;
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
    std::memset(db + i * db_stride, 0, size_t(cols) * sizeof(float));  // overwrites, as the ABI says
    if (int rc = bias_gradient(ctx, dz + i * rows * cols, db + i * db_stride, rows, cols)) return rc;
  }
  return 0;
}
int packed_softmax_cross_entropy(HpctuneGpuContext* ctx, const float* logits, const int32_t* labels,
                                 int64_t labels_stride, int64_t models, int64_t rows, int64_t classes, float grad_scale,
                                 float* dlogits, float* loss, int32_t* correct) {
  if (!models_ok(models) || rows <= 0 || classes <= 0 || labels_stride < 0)
    return fail("packed_softmax_cross_entropy: sizes or pointers");
  for (int64_t i = 0; i < models; ++i)
    if (int rc = softmax_cross_entropy(ctx, logits + i * rows * classes, labels + i * labels_stride, rows, classes,
                                       grad_scale, dlogits != nullptr ? dlogits + i * rows * classes : nullptr, loss + i,
                                       correct + i))
      return rc;
  return 0;
}
int packed_sgd_update(HpctuneGpuContext* ctx, float* p, const float* g, float* v, int64_t stride, int64_t count,
                      int64_t models, const float* lr, const float* momentum, const float* wd, int32_t nesterov) {
  if (!models_ok(models) || count <= 0 || stride < count || v == nullptr || lr == nullptr || momentum == nullptr)
    return fail("packed_sgd_update: sizes or pointers");
  for (int64_t i = 0; i < models; ++i)
    if (int rc = sgd_update(ctx, p + i * stride, g + i * stride, v + i * stride, count, lr[i], momentum[i],
                            wd != nullptr ? wd[i] : 0.f, nesterov))
      return rc;
  return 0;
}
int packed_gather(HpctuneGpuContext*, const float* images, const int32_t* labels, int64_t set_rows, int64_t features,
                  const int32_t* index, int64_t index_stride, int64_t models, int64_t rows, float* x, int32_t* y) {
  if (!models_ok(models) || rows <= 0 || features <= 0 || index_stride < 0) return fail("packed_gather: sizes");
  for (int64_t i = 0; i < models; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t j = index[i * index_stride + r];
      if (j < 0 || j >= set_rows) continue;  // left as it was, as the ABI says
      std::memcpy(x + (i * rows + r) * features, images + j * features, size_t(features) * sizeof(float));
      y[i * rows + r] = labels[j];
    }
  return 0;
}

// Designated, so that entries added to the table elsewhere stay null here until implemented here too.
const HpctuneGpuApi kApi = {
    .abi_version = HPCTUNE_GPU_ABI_VERSION,
    .struct_size = sizeof(HpctuneGpuApi),
    .last_error = last_error,
    .device_count = device_count,
    .driver_version = driver_version,
    .runtime_version = runtime_version,
    .device_properties = device_properties,
    .context_create = context_create,
    .context_destroy = context_destroy,
    .synchronize = synchronize,
    .alloc = alloc,
    .release = release,
    .copy_to_device = copy_to_device,
    .copy_to_host = copy_to_host,
    .fill_zero = fill_zero,
    .set_tf32 = set_tf32,
    .gemm = gemm,
    .bias_activation_forward = bias_activation_forward,
    .relu_backward = relu_backward,
    .bias_gradient = bias_gradient,
    .softmax_cross_entropy = softmax_cross_entropy,
    .sgd_update = sgd_update,
    .adam_update = adam_update,
    .nccl_version = cpu_reference::nccl_version,
    .nccl_unique_id = cpu_reference::nccl_unique_id,
    .nccl_comm_init = cpu_reference::nccl_comm_init,
    .allreduce_sum_f32 = cpu_reference::allreduce_sum_f32,
    .comm_poll = cpu_reference::comm_poll,
    .comm_abort = cpu_reference::comm_abort,
    .comm_destroy = cpu_reference::comm_destroy,
    .bias_activation_nchw = bias_activation_nchw,
    .activation_backward = activation_backward,
    .bias_gradient_nchw = bias_gradient_nchw,
    .cudnn_version = cudnn_version,
    .conv_forward = conv_forward,
    .conv_backward_data = conv_backward_data,
    .conv_backward_filter = conv_backward_filter,
    .maxpool_forward = maxpool_forward,
    .maxpool_backward = maxpool_backward,
    .dropout_forward = dropout_forward,
    .dropout_backward = dropout_backward,
    .f32_to_bf16 = f32_to_bf16,
    .gemm_bf16 = gemm_bf16,
    .gather_rows = gather_rows,
    .softmax = softmax,
    .gemm_strided_batched = gemm_strided_batched,
    .packed_bias_activation_forward = packed_bias_activation_forward,
    .packed_bias_gradient = packed_bias_gradient,
    .packed_softmax_cross_entropy = packed_softmax_cross_entropy,
    .packed_sgd_update = packed_sgd_update,
    .packed_gather = packed_gather,
    .nccl_group_start = cpu_reference::nccl_group_start,
    .nccl_group_end = cpu_reference::nccl_group_end,
    .send_f32 = cpu_reference::send_f32,
    .recv_f32 = cpu_reference::recv_f32,
};

}  // namespace

int cpu_reference::fail_with(const std::string& message) {
  std::snprintf(g_error, sizeof g_error, "%s", message.c_str());
  return -1;
}

extern "C" __attribute__((visibility("default"))) const HpctuneGpuApi* hpctune_gpu_api(void) { return &kApi; }
