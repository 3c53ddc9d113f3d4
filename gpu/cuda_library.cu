// libhpctune_gpu_cuda.so: the CUDA side of the built-in trainers, behind the C table of
// gpu/gpu_library_abi.h. Only gpu/gpu_backend.cpp loads it (dlopen), so nothing else in hpctune
// needs libcudart or cuBLAS at startup.
//
// What is here: the device inventory, a context (device, stream, cuBLAS handle), memory, cuBLAS
// SGEMM in row-major terms, and the elementwise kernels of a dense network's training step: the
// bias + ReLU epilogue in one pass, ReLU backward, the bias gradient, softmax cross-entropy with its
// gradient (one block per row), and the SGD/momentum update (one pass over parameters, gradients
// and velocity). Each mirrors its CPU reference in nn/ (named at the function in the ABI header).
// ABI 3 adds the GPU network's pieces (gpu/gpu_network.h): cuDNN convolutions (legacy API, algorithms
// from the _v7 heuristics, cached per shape in the context with a workspace the context owns and
// grows), the NCHW bias + activation pass and its backward, the per-channel bias gradient, max
// pooling with argmax, counter-based dropout, bf16 GEMMs, the data set's row gather and softmax.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#ifdef HPCTUNE_GPU_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#ifdef HPCTUNE_GPU_HAVE_NCCL
#include <nccl.h>
#endif

#include "gpu/cuda_packed.h"
#include "gpu/cuda_row_softmax.cuh"
#include "gpu/gpu_library_abi.h"

namespace {
struct ConvPlan;  // a cached convolution (descriptors and algorithms), see the conv entries
void destroy_conv_plans(HpctuneGpuContext* ctx);
}  // namespace

struct HpctuneGpuContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
#ifdef HPCTUNE_GPU_HAVE_CUDNN
  cudnnHandle_t dnn = nullptr;  // made on the first conv call
#endif
  ConvPlan* plans = nullptr;    // a list, newest first, at most kMaxConvPlans
  void* workspace = nullptr;    // cuDNN's workspace, grown as needed
  size_t workspace_bytes = 0;
  float* row_loss = nullptr;    // softmax_cross_entropy's per-row losses, summed in a fixed order
  int64_t row_loss_rows = 0;
};

namespace {

thread_local char g_last_error[512] = "";

int fail(int code, const char* what, const char* detail) {
  std::snprintf(g_last_error, sizeof g_last_error, "%s: %s (code %d)", what, detail, code);
  return code == 0 ? -1 : code;
}
int check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  return fail(static_cast<int>(e), what, cudaGetErrorString(e));
}
int check_blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  return fail(static_cast<int>(s), what, cublasGetStatusString(s));
}
int bad_argument(const char* what) { return fail(-1, what, "invalid argument"); }
// The error of the launch just queued (a bad configuration; faults inside come at synchronize()).
int check_launch(const char* what) { return check_cuda(cudaGetLastError(), what); }

constexpr int kThreads = 256;
unsigned blocks_for(int64_t count) {
  int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? b : 65535 * 8);  // grid-stride loops cover the rest
}

// ---- kernels ----------------------------------------------------------------------------------

__global__ void bias_activation_kernel(float* y, const float* bias, int64_t rows, int64_t cols, int relu) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = y[i] + bias[i % cols];
    y[i] = relu && v < 0.f ? 0.f : v;
  }
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dz, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    dz[i] = y[i] > 0.f ? dy[i] : 0.f;
}

// One thread per column, summing down the rows (coalesced across the threads of a warp).
__global__ void bias_gradient_kernel(const float* dz, float* db, int64_t rows, int64_t cols) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int64_t r = 0; r < rows; ++r) sum += dz[r * cols + c];
    db[c] += sum;
  }
}

using hpctune_cuda::block_reduce;

// One block per row: max, sum of exp, loss = log(sum) + max - logit[label], gradient.
__global__ void softmax_xent_kernel(const float* logits, const int32_t* labels, int64_t classes, float grad_scale,
                                    float* dlogits, float* row_loss, int32_t* correct) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* z = logits + row * classes;
  const int label = labels[row];
  const bool label_ok = label >= 0 && label < classes;  // a bad label: NaN loss, no one-hot term
  const hpctune_cuda::RowSoftmax st = hpctune_cuda::row_softmax(z, classes, shared);
  const float m = st.max, s = st.sum;
  if (dlogits != nullptr) {
    const float inv = 1.f / s;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      dlogits[row * classes + c] = grad_scale * (expf(z[c] - m) * inv - (c == label ? 1.f : 0.f));
  }
  if (threadIdx.x == 0) {
    row_loss[row] = label_ok ? logf(s) + m - z[label] : NAN;
    if (st.argmax == label) atomicAdd(correct, 1);  // integers: any order gives the same sum
  }
}

// *out += the sum of v[0..n) in a fixed order (one block, strided partial sums, then a fixed tree),
// so the loss a run reports is the same bits every time (float atomics would add in any order).
__global__ void sum_rows_kernel(const float* v, int64_t n, float* out) {
  __shared__ float shared[32];
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
  s = block_reduce(s, shared, false);
  if (threadIdx.x == 0) *out += s;
}

__global__ void sgd_kernel(float* p, const float* grad, float* v, int64_t count, float lr, float momentum, float wd,
                           int nesterov) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float g = grad[i] + wd * p[i];
    if (v == nullptr) {
      p[i] -= lr * g;
      continue;
    }
    float vi = momentum * v[i] + g;
    v[i] = vi;
    p[i] -= lr * (nesterov ? g + momentum * vi : vi);
  }
}

__global__ void adam_kernel(float* p, const float* grad, float* m, float* v, int64_t count, float step_size,
                            float sqrt_bc2, float b1, float b2, float eps, float wd, float shrink, int decoupled) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float g = grad[i];
    float pi = p[i];
    if (decoupled) pi *= shrink;
    else g += wd * pi;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (sqrtf(vi) / sqrt_bc2 + eps);
  }
}

// ---- the table's functions --------------------------------------------------------------------

const char* last_error() { return g_last_error; }

int device_count(int32_t* count) {
  *count = 0;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-less error so later calls start clean
    return fail(static_cast<int>(e), "cudaGetDeviceCount", cudaGetErrorString(e));
  }
  *count = n;
  return 0;
}

int driver_version(int32_t* version) {
  int v = 0;
  int rc = check_cuda(cudaDriverGetVersion(&v), "cudaDriverGetVersion");
  *version = v;
  return rc;
}

int runtime_version(int32_t* version) {
  int v = 0;
  int rc = check_cuda(cudaRuntimeGetVersion(&v), "cudaRuntimeGetVersion");
  *version = v;
  return rc;
}

int device_properties(int32_t device, HpctuneGpuDeviceProps* out) {
  std::memset(out, 0, sizeof *out);
  cudaDeviceProp p{};
  if (int rc = check_cuda(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties")) return rc;
  std::snprintf(out->name, sizeof out->name, "%s", p.name);
  out->memory_bytes = p.totalGlobalMem;
  out->compute_major = p.major;
  out->compute_minor = p.minor;
  out->multiprocessors = p.multiProcessorCount;
  std::snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
  return 0;
}

void context_destroy(HpctuneGpuContext* ctx) {
  if (ctx == nullptr) return;
  cudaSetDevice(ctx->device);
  destroy_conv_plans(ctx);
  if (ctx->workspace != nullptr) cudaFreeAsync(ctx->workspace, ctx->stream);
  if (ctx->row_loss != nullptr) cudaFreeAsync(ctx->row_loss, ctx->stream);
#ifdef HPCTUNE_GPU_HAVE_CUDNN
  if (ctx->dnn != nullptr) cudnnDestroy(ctx->dnn);
#endif
  if (ctx->stream != nullptr) cudaStreamSynchronize(ctx->stream);
  if (ctx->blas != nullptr) cublasDestroy(ctx->blas);
  if (ctx->stream != nullptr) cudaStreamDestroy(ctx->stream);
  delete ctx;
}

int context_create(int32_t device, HpctuneGpuContext** out) {
  *out = nullptr;
  auto* ctx = new HpctuneGpuContext;
  ctx->device = device;
  int rc = check_cuda(cudaSetDevice(device), "cudaSetDevice");
  if (rc == 0) rc = check_cuda(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (rc == 0) rc = check_blas(cublasCreate(&ctx->blas), "cublasCreate");
  if (rc == 0) rc = check_blas(cublasSetStream(ctx->blas, ctx->stream), "cublasSetStream");
  if (rc == 0) rc = check_blas(cublasSetMathMode(ctx->blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  if (rc != 0) {
    context_destroy(ctx);
    return rc;
  }
  *out = ctx;
  return 0;
}

int synchronize(HpctuneGpuContext* ctx) { return check_cuda(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize"); }

int alloc(HpctuneGpuContext* ctx, size_t bytes, void** out) {
  *out = nullptr;
  return check_cuda(cudaMallocAsync(out, bytes, ctx->stream), "cudaMallocAsync");
}

int release(HpctuneGpuContext* ctx, void* ptr) {
  return ptr == nullptr ? 0 : check_cuda(cudaFreeAsync(ptr, ctx->stream), "cudaFreeAsync");
}

int copy_to_device(HpctuneGpuContext* ctx, void* dst, const void* src, size_t bytes) {
  return check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream), "cudaMemcpyAsync (to device)");
}

int copy_to_host(HpctuneGpuContext* ctx, void* dst, const void* src, size_t bytes) {
  if (int rc = check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream), "cudaMemcpyAsync (to host)"))
    return rc;
  return synchronize(ctx);
}

int fill_zero(HpctuneGpuContext* ctx, void* ptr, size_t bytes) {
  return check_cuda(cudaMemsetAsync(ptr, 0, bytes, ctx->stream), "cudaMemsetAsync");
}

int set_tf32(HpctuneGpuContext* ctx, int32_t enabled) {
  return check_blas(cublasSetMathMode(ctx->blas, enabled ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH),
                    "cublasSetMathMode");
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first, n and m swapped.
int gemm(HpctuneGpuContext* ctx, int32_t transpose_a, int32_t transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
         const float* a, const float* b, float beta, float* c) {
  if (m <= 0 || n <= 0 || k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return bad_argument("gemm: sizes");
  const int lda = static_cast<int>(transpose_a ? m : k);
  const int ldb = static_cast<int>(transpose_b ? k : n);
  return check_blas(cublasSgemm(ctx->blas, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb, a, lda,
                                &beta, c, static_cast<int>(n)),
                    "cublasSgemm");
}

int bias_activation_forward(HpctuneGpuContext* ctx, float* y, const float* bias, int64_t rows, int64_t cols, int32_t relu) {
  if (rows <= 0 || cols <= 0) return bad_argument("bias_activation_forward: sizes");
  bias_activation_kernel<<<blocks_for(rows * cols), kThreads, 0, ctx->stream>>>(y, bias, rows, cols, relu);
  return check_launch("bias_activation_forward");
}

int relu_backward(HpctuneGpuContext* ctx, const float* y, const float* dy, float* dz, int64_t count) {
  if (count <= 0) return bad_argument("relu_backward: count");
  relu_backward_kernel<<<blocks_for(count), kThreads, 0, ctx->stream>>>(y, dy, dz, count);
  return check_launch("relu_backward");
}

int bias_gradient(HpctuneGpuContext* ctx, const float* dz, float* db, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return bad_argument("bias_gradient: sizes");
  bias_gradient_kernel<<<blocks_for(cols), kThreads, 0, ctx->stream>>>(dz, db, rows, cols);
  return check_launch("bias_gradient");
}

int softmax_cross_entropy(HpctuneGpuContext* ctx, const float* logits, const int32_t* labels, int64_t rows,
                          int64_t classes, float grad_scale, float* dlogits, float* loss, int32_t* correct) {
  if (rows <= 0 || rows > INT32_MAX || classes <= 0) return bad_argument("softmax_cross_entropy: sizes");
  if (rows > ctx->row_loss_rows) {
    if (ctx->row_loss != nullptr) cudaFreeAsync(ctx->row_loss, ctx->stream);
    ctx->row_loss = nullptr;
    ctx->row_loss_rows = 0;
    if (int rc = check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&ctx->row_loss), size_t(rows) * sizeof(float), ctx->stream),
                            "cudaMallocAsync (per-row losses)")) {
      cudaGetLastError();
      return rc;
    }
    ctx->row_loss_rows = rows;
  }
  const int threads = classes >= 256 ? 256 : 32 * static_cast<int>((classes + 31) / 32);
  softmax_xent_kernel<<<static_cast<unsigned>(rows), threads, 0, ctx->stream>>>(logits, labels, classes, grad_scale,
                                                                               dlogits, ctx->row_loss, correct);
  if (int rc = check_launch("softmax_cross_entropy")) return rc;
  sum_rows_kernel<<<1, 256, 0, ctx->stream>>>(ctx->row_loss, rows, loss);
  return check_launch("softmax_cross_entropy (loss sum)");
}

int sgd_update(HpctuneGpuContext* ctx, float* params, const float* grads, float* velocity, int64_t count, float lr,
               float momentum, float weight_decay, int32_t nesterov) {
  if (count <= 0) return bad_argument("sgd_update: count");
  if (momentum != 0.f && velocity == nullptr) return bad_argument("sgd_update: momentum without a velocity buffer");
  sgd_kernel<<<blocks_for(count), kThreads, 0, ctx->stream>>>(params, grads, momentum != 0.f ? velocity : nullptr,
                                                              count, lr, momentum, weight_decay, nesterov);
  return check_launch("sgd_update");
}

int adam_update(HpctuneGpuContext* ctx, float* params, const float* grads, float* m, float* v, int64_t count, float lr,
                float beta1, float beta2, float eps, float weight_decay, int32_t decoupled, int64_t step) {
  if (count <= 0 || step < 1 || m == nullptr || v == nullptr) return bad_argument("adam_update: count, step or buffers");
  // The bias corrections in double, then rounded to float, as nn::Optimizer does.
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  const float step_size = static_cast<float>(double(lr) / bc1);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  adam_kernel<<<blocks_for(count), kThreads, 0, ctx->stream>>>(params, grads, m, v, count, step_size, sqrt_bc2, beta1, beta2,
                                                               eps, weight_decay, 1.0f - lr * weight_decay, decoupled);
  return check_launch("adam_update");
}

// ---- the GPU network (ABI 3) ------------------------------------------------------------------

constexpr int64_t kMaxElements = (int64_t(1) << 31) - 1;  // int-indexed libraries (cuDNN, cuBLAS)
bool bad_count(int64_t count) { return count <= 0 || count > kMaxElements; }

__device__ __forceinline__ float activate(float v, int act) {
  switch (act) {
    case HPCTUNE_ACT_RELU: return v < 0.f ? 0.f : v;
    case HPCTUNE_ACT_TANH: return tanhf(v);
    case HPCTUNE_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
    default: return v;
  }
}

__global__ void bias_activation_nchw_kernel(float* y, const float* bias, int64_t n, int64_t channels, int64_t spatial,
                                            int act) {
  const int64_t total = n * channels * spatial;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float v = y[i];
    if (bias != nullptr) v += bias[(i / spatial) % channels];
    y[i] = activate(v, act);
  }
}

__global__ void activation_backward_kernel(const float* y, const float* dy, float* dz, int64_t count, int act) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float yi = y[i], g = dy[i];
    switch (act) {
      case HPCTUNE_ACT_RELU: dz[i] = yi > 0.f ? g : 0.f; break;
      case HPCTUNE_ACT_TANH: dz[i] = g * (1.0f - yi * yi); break;
      case HPCTUNE_ACT_SIGMOID: dz[i] = g * (yi * (1.0f - yi)); break;
      default: dz[i] = g; break;
    }
  }
}

// One block per channel; each thread sums a fixed strided subset, then a fixed tree: deterministic.
__global__ void bias_gradient_nchw_kernel(const float* dz, float* db, int64_t n, int64_t channels, int64_t spatial) {
  __shared__ float shared[32];
  const int64_t c = blockIdx.x;
  const int64_t per_channel = n * spatial;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < per_channel; i += blockDim.x) {
    const int64_t sample = i / spatial, s = i % spatial;
    sum += dz[(sample * channels + c) * spatial + s];
  }
  sum = block_reduce(sum, shared, false);
  if (threadIdx.x == 0) db[c] += sum;
}

__global__ void maxpool_forward_kernel(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t h, int64_t w,
                                       int64_t oh, int64_t ow, int64_t size, int64_t stride) {
  const int64_t total = planes * oh * ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (oh * ow), o = i % (oh * ow), oy = o / ow, ox = o % ow;
    const float* xp = x + plane * h * w;
    int64_t best = oy * stride * w + ox * stride;
    float best_v = xp[best];
    for (int64_t ky = 0; ky < size; ++ky)
      for (int64_t kx = 0; kx < size; ++kx) {
        const int64_t at = (oy * stride + ky) * w + ox * stride + kx;
        const float v = xp[at];
        if (v > best_v) {
          best_v = v;
          best = at;
        }
      }
    y[i] = best_v;
    if (argmax != nullptr) argmax[i] = static_cast<int32_t>(best);
  }
}

__global__ void maxpool_backward_kernel(const float* dy, const int32_t* argmax, float* dx, int64_t planes, int64_t h,
                                        int64_t w, int64_t oh, int64_t ow, int64_t size, int64_t stride) {
  const int64_t total = planes * h * w;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (h * w), at = i % (h * w), iy = at / w, ix = at % w;
    // Windows oy with oy * stride <= iy < oy * stride + size, likewise ox.
    const int64_t oy0 = iy >= size ? (iy - size) / stride + 1 : 0, oy1 = iy / stride < oh ? iy / stride : oh - 1;
    const int64_t ox0 = ix >= size ? (ix - size) / stride + 1 : 0, ox1 = ix / stride < ow ? ix / stride : ow - 1;
    float sum = 0.f;
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const int64_t o = plane * oh * ow + oy * ow + ox;
        if (argmax[o] == at) sum += dy[o];
      }
    dx[i] = sum;
  }
}

__host__ __device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// mask(i) = 0 when the high 32 bits of splitmix64(key + i) < threshold, else scale; y = x * mask.
__global__ void dropout_kernel(const float* x, float* y, int64_t count, uint64_t key, uint64_t threshold, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = splitmix64(key + static_cast<uint64_t>(i)) >> 32;
    y[i] = x[i] * (r < threshold ? 0.0f : scale);
  }
}

__global__ void f32_to_bf16_kernel(const float* src, __nv_bfloat16* dst, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void gather_rows_kernel(const float* src, const int32_t* src_labels, int64_t rows, int64_t features,
                                   const int64_t* index, int64_t count, float* dst, int32_t* dst_labels) {
  const int64_t total = count * features;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / features, f = i % features;
    const int64_t row = index[r];
    const bool ok = row >= 0 && row < rows;
    dst[i] = ok ? src[row * features + f] : 0.f;
    if (f == 0 && dst_labels != nullptr) dst_labels[r] = ok && src_labels != nullptr ? src_labels[row] : -1;
  }
}

// One block per row, as softmax_xent_kernel.
__global__ void softmax_kernel(const float* logits, int64_t classes, float* probs) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* z = logits + row * classes;
  const hpctune_cuda::RowSoftmax st = hpctune_cuda::row_softmax(z, classes, shared);
  const float m = st.max, s = st.sum;
  const float inv = 1.f / s;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) probs[row * classes + c] = expf(z[c] - m) * inv;
}

bool bad_activation(int32_t a) { return a < HPCTUNE_ACT_NONE || a > HPCTUNE_ACT_SIGMOID; }

int bias_activation_nchw(HpctuneGpuContext* ctx, float* y, const float* bias, int64_t n, int64_t channels,
                         int64_t spatial, int32_t activation) {
  if (n <= 0 || channels <= 0 || spatial <= 0 || bad_count(n * channels) || bad_count(n * channels * spatial) ||
      y == nullptr || bad_activation(activation))
    return bad_argument("bias_activation_nchw: sizes, pointer or activation");
  bias_activation_nchw_kernel<<<blocks_for(n * channels * spatial), kThreads, 0, ctx->stream>>>(y, bias, n, channels,
                                                                                                spatial, activation);
  return check_launch("bias_activation_nchw");
}

int activation_backward(HpctuneGpuContext* ctx, const float* y, const float* dy, float* dz, int64_t count,
                        int32_t activation) {
  if (bad_count(count) || y == nullptr || dy == nullptr || dz == nullptr || bad_activation(activation))
    return bad_argument("activation_backward: count, pointers or activation");
  activation_backward_kernel<<<blocks_for(count), kThreads, 0, ctx->stream>>>(y, dy, dz, count, activation);
  return check_launch("activation_backward");
}

int bias_gradient_nchw(HpctuneGpuContext* ctx, const float* dz, float* db, int64_t n, int64_t channels, int64_t spatial) {
  if (n <= 0 || channels <= 0 || spatial <= 0 || bad_count(channels) || bad_count(n * channels * spatial) ||
      dz == nullptr || db == nullptr)
    return bad_argument("bias_gradient_nchw: sizes or pointers");
  bias_gradient_nchw_kernel<<<static_cast<unsigned>(channels), kThreads, 0, ctx->stream>>>(dz, db, n, channels, spatial);
  return check_launch("bias_gradient_nchw");
}

bool bad_pool(int64_t n, int64_t c, int64_t h, int64_t w, int64_t size, int64_t stride) {
  return n <= 0 || c <= 0 || h <= 0 || w <= 0 || size <= 0 || stride <= 0 || size > h || size > w ||
         bad_count(n * c) || bad_count(n * c * h) || bad_count(n * c * h * w);
}

int maxpool_forward(HpctuneGpuContext* ctx, const float* x, float* y, int32_t* argmax, int64_t n, int64_t c, int64_t h,
                    int64_t w, int64_t size, int64_t stride) {
  if (bad_pool(n, c, h, w, size, stride) || x == nullptr || y == nullptr)
    return bad_argument("maxpool_forward: sizes or pointers");
  const int64_t oh = (h - size) / stride + 1, ow = (w - size) / stride + 1;
  maxpool_forward_kernel<<<blocks_for(n * c * oh * ow), kThreads, 0, ctx->stream>>>(x, y, argmax, n * c, h, w, oh, ow,
                                                                                    size, stride);
  return check_launch("maxpool_forward");
}

int maxpool_backward(HpctuneGpuContext* ctx, const float* dy, const int32_t* argmax, float* dx, int64_t n, int64_t c,
                     int64_t h, int64_t w, int64_t size, int64_t stride) {
  if (bad_pool(n, c, h, w, size, stride) || dy == nullptr || argmax == nullptr || dx == nullptr)
    return bad_argument("maxpool_backward: sizes or pointers");
  const int64_t oh = (h - size) / stride + 1, ow = (w - size) / stride + 1;
  maxpool_backward_kernel<<<blocks_for(n * c * h * w), kThreads, 0, ctx->stream>>>(dy, argmax, dx, n * c, h, w, oh, ow,
                                                                                   size, stride);
  return check_launch("maxpool_backward");
}

int dropout_apply(HpctuneGpuContext* ctx, const float* x, float* y, int64_t count, double rate, uint64_t seed,
                  uint64_t offset, const char* what) {
  if (bad_count(count) || x == nullptr || y == nullptr || !(rate >= 0.0 && rate < 1.0)) return bad_argument(what);
  const uint64_t key = splitmix64(seed ^ splitmix64(offset));
  const uint64_t threshold = static_cast<uint64_t>(rate * 4294967296.0);
  const float scale = static_cast<float>(1.0 / (1.0 - rate));
  dropout_kernel<<<blocks_for(count), kThreads, 0, ctx->stream>>>(x, y, count, key, threshold, scale);
  return check_launch(what);
}

int dropout_forward(HpctuneGpuContext* ctx, const float* x, float* y, int64_t count, double rate, uint64_t seed,
                    uint64_t offset) {
  return dropout_apply(ctx, x, y, count, rate, seed, offset, "dropout_forward: count, pointers or rate");
}

int dropout_backward(HpctuneGpuContext* ctx, const float* dy, float* dx, int64_t count, double rate, uint64_t seed,
                     uint64_t offset) {
  return dropout_apply(ctx, dy, dx, count, rate, seed, offset, "dropout_backward: count, pointers or rate");
}

int f32_to_bf16(HpctuneGpuContext* ctx, const float* src, uint16_t* dst, int64_t count) {
  if (bad_count(count) || src == nullptr || dst == nullptr) return bad_argument("f32_to_bf16: count or pointers");
  f32_to_bf16_kernel<<<blocks_for(count), kThreads, 0, ctx->stream>>>(src, reinterpret_cast<__nv_bfloat16*>(dst), count);
  return check_launch("f32_to_bf16");
}

int gemm_bf16(HpctuneGpuContext* ctx, int32_t transpose_a, int32_t transpose_b, int64_t m, int64_t n, int64_t k,
              float alpha, const uint16_t* a, const uint16_t* b, float beta, float* c) {
  if (m <= 0 || n <= 0 || k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return bad_argument("gemm_bf16: sizes");
  const int lda = static_cast<int>(transpose_a ? m : k);
  const int ldb = static_cast<int>(transpose_b ? k : n);
  return check_blas(cublasGemmEx(ctx->blas, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, CUDA_R_16BF,
                                 ldb, a, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx (bf16)");
}

int gather_rows(HpctuneGpuContext* ctx, const float* src, const int32_t* src_labels, int64_t rows, int64_t features,
                const int64_t* index, int64_t count, float* dst, int32_t* dst_labels) {
  if (rows <= 0 || features <= 0 || bad_count(count) || bad_count(count * features) || src == nullptr ||
      index == nullptr || dst == nullptr)
    return bad_argument("gather_rows: sizes or pointers");
  gather_rows_kernel<<<blocks_for(count * features), kThreads, 0, ctx->stream>>>(src, src_labels, rows, features, index,
                                                                                 count, dst, dst_labels);
  return check_launch("gather_rows");
}

int softmax(HpctuneGpuContext* ctx, const float* logits, int64_t rows, int64_t classes, float* probs) {
  if (rows <= 0 || rows > INT32_MAX || classes <= 0 || bad_count(rows * classes) || logits == nullptr || probs == nullptr)
    return bad_argument("softmax: sizes or pointers");
  const int threads = classes >= 256 ? 256 : 32 * static_cast<int>((classes + 31) / 32);
  softmax_kernel<<<static_cast<unsigned>(rows), threads, 0, ctx->stream>>>(logits, classes, probs);
  return check_launch("softmax");
}

// ---- cuDNN convolutions -------------------------------------------------------------------------

#ifdef HPCTUNE_GPU_HAVE_CUDNN

constexpr int kMaxConvPlans = 64;
constexpr size_t kMaxWorkspace = size_t(1) << 30;  // algorithms needing more are not chosen

bool bad_conv_shape(const HpctuneConvShape* s) {
  if (s == nullptr) return true;
  if (s->n <= 0 || s->c <= 0 || s->h <= 0 || s->w <= 0 || s->filters <= 0 || s->kernel <= 0 || s->stride <= 0 ||
      s->pad < 0 || s->pad >= s->kernel || s->out_h <= 0 || s->out_w <= 0)
    return true;
  if (s->math != 0 && s->math != 1) return true;
  if (s->deterministic != 0 && s->deterministic != 1) return true;
  if (s->out_h != (s->h + 2 * s->pad - s->kernel) / s->stride + 1 || s->out_w != (s->w + 2 * s->pad - s->kernel) / s->stride + 1)
    return true;
  if (s->h + 2 * s->pad < s->kernel || s->w + 2 * s->pad < s->kernel) return true;
  return bad_count(s->n * s->c * s->h * s->w) || bad_count(s->n * s->filters * s->out_h * s->out_w) ||
         bad_count(s->filters * s->c * s->kernel * s->kernel);
}


// An algorithm a direction may run, with its math type and workspace.
struct ConvAlgo {
  int algo = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t bytes = 0;
};
constexpr int kMaxCandidates = 8;

// One direction (forward, backward data or backward filter): its descriptor and the candidates in
// the heuristic's order; `current` is the first that ran (a call that cuDNN refuses, such as
// CUDNN_STATUS_NOT_SUPPORTED, moves on to the next, as PyTorch does with the _v7 list).
struct ConvDirection {
  cudnnConvolutionDescriptor_t desc = nullptr;
  ConvAlgo candidates[kMaxCandidates];
  int count = 0, current = 0;
};

struct ConvPlan {
  HpctuneConvShape shape{};
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  ConvDirection fwd, bwd_data, bwd_filter;
  ConvPlan* next = nullptr;
};

void free_plan(ConvPlan* p) {
  if (p->x) cudnnDestroyTensorDescriptor(p->x);
  if (p->y) cudnnDestroyTensorDescriptor(p->y);
  if (p->w) cudnnDestroyFilterDescriptor(p->w);
  for (ConvDirection* d : {&p->fwd, &p->bwd_data, &p->bwd_filter})
    if (d->desc) cudnnDestroyConvolutionDescriptor(d->desc);
  delete p;
}

void destroy_conv_plans(HpctuneGpuContext* ctx) {
  while (ctx->plans != nullptr) {
    ConvPlan* next = ctx->plans->next;
    free_plan(ctx->plans);
    ctx->plans = next;
  }
}

int check_dnn(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return 0;
  char detail[256] = "";
  cudnnGetLastErrorString(detail, sizeof detail);
  char message[400];
  std::snprintf(message, sizeof message, "%s%s%s", cudnnGetErrorString(s), detail[0] ? ": " : "", detail);
  return fail(static_cast<int>(s), what, message);
}

int cudnn_version(int64_t* version) {
  if (version == nullptr) return bad_argument("cudnn_version: version");
  *version = static_cast<int64_t>(cudnnGetVersion());
  return 0;
}

int ensure_dnn(HpctuneGpuContext* ctx) {
  if (ctx->dnn != nullptr) return 0;
  if (int rc = check_cuda(cudaSetDevice(ctx->device), "cudaSetDevice")) return rc;
  cudnnHandle_t h = nullptr;
  if (int rc = check_dnn(cudnnCreate(&h), "cudnnCreate")) return rc;
  if (int rc = check_dnn(cudnnSetStream(h, ctx->stream), "cudnnSetStream")) {
    cudnnDestroy(h);
    return rc;
  }
  ctx->dnn = h;
  return 0;
}

int ensure_workspace(HpctuneGpuContext* ctx, size_t bytes) {
  if (bytes <= ctx->workspace_bytes) return 0;
  if (ctx->workspace != nullptr) {
    if (int rc = check_cuda(cudaFreeAsync(ctx->workspace, ctx->stream), "cudaFreeAsync (cuDNN workspace)")) return rc;
    ctx->workspace = nullptr;
    ctx->workspace_bytes = 0;
  }
  if (int rc = check_cuda(cudaMallocAsync(&ctx->workspace, bytes, ctx->stream), "cudaMallocAsync (cuDNN workspace)")) {
    cudaGetLastError();  // out of memory is not sticky: clear it, or the next launch check would report it
    ctx->workspace = nullptr;
    return rc;
  }
  ctx->workspace_bytes = bytes;
  return 0;
}

// The usable results of a _v7 heuristic, in its order: succeeded, fit kMaxWorkspace, deterministic
// when asked, and for strict fp32 FMA-only kernels (DEFAULT_MATH may be TF32 on Ampere and later).
// Then the fixed fallback (IMPLICIT_GEMM forward, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1: deterministic
// FMA kernels for every shape) when not listed yet; its workspace is asked with `workspace`.
template <typename Perf, typename Workspace>
int collect(const Perf* perf, int count, const HpctuneConvShape* s, int fallback, ConvDirection* d, Workspace workspace) {
  const bool deterministic = s->deterministic != 0, strict = s->math != 1;
  bool has_fallback = false;
  for (int i = 0; i < count && d->count < kMaxCandidates - 1; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    if (strict && p.mathType != CUDNN_FMA_MATH) continue;
    d->candidates[d->count++] = ConvAlgo{static_cast<int>(p.algo), p.mathType, p.memory};
    has_fallback = has_fallback || (static_cast<int>(p.algo) == fallback && p.mathType == CUDNN_FMA_MATH);
  }
  if (!has_fallback) {
    size_t bytes = 0;
    if (int rc = check_dnn(cudnnSetConvolutionMathType(d->desc, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType")) return rc;
    if (int rc = workspace(fallback, &bytes)) return rc;
    d->candidates[d->count++] = ConvAlgo{fallback, CUDNN_FMA_MATH, bytes};
  }
  return 0;
}

int make_conv_desc(const HpctuneConvShape* s, cudnnConvolutionDescriptor_t* out) {
  if (int rc = check_dnn(cudnnCreateConvolutionDescriptor(out), "cudnnCreateConvolutionDescriptor")) return rc;
  const int pad = static_cast<int>(s->pad), stride = static_cast<int>(s->stride);
  if (int rc = check_dnn(cudnnSetConvolution2dDescriptor(*out, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                         CUDNN_DATA_FLOAT),
                         "cudnnSetConvolution2dDescriptor"))
    return rc;
  return check_dnn(cudnnSetConvolutionMathType(*out, s->math == 1 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
                   "cudnnSetConvolutionMathType");
}

int build_plan(HpctuneGpuContext* ctx, const HpctuneConvShape* s, ConvPlan* p) {
  const int n = static_cast<int>(s->n), c = static_cast<int>(s->c), h = static_cast<int>(s->h), w = static_cast<int>(s->w);
  const int k = static_cast<int>(s->filters), r = static_cast<int>(s->kernel);
  const int oh = static_cast<int>(s->out_h), ow = static_cast<int>(s->out_w);
  int rc = check_dnn(cudnnCreateTensorDescriptor(&p->x), "cudnnCreateTensorDescriptor");
  if (rc == 0) rc = check_dnn(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w), "cudnnSetTensor4dDescriptor (x)");
  if (rc == 0) rc = check_dnn(cudnnCreateTensorDescriptor(&p->y), "cudnnCreateTensorDescriptor");
  if (rc == 0) rc = check_dnn(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, oh, ow), "cudnnSetTensor4dDescriptor (y)");
  if (rc == 0) rc = check_dnn(cudnnCreateFilterDescriptor(&p->w), "cudnnCreateFilterDescriptor");
  if (rc == 0) rc = check_dnn(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, r, r), "cudnnSetFilter4dDescriptor");
  if (rc == 0) rc = make_conv_desc(s, &p->fwd.desc);
  if (rc == 0) rc = make_conv_desc(s, &p->bwd_data.desc);
  if (rc == 0) rc = make_conv_desc(s, &p->bwd_filter.desc);
  if (rc != 0) return rc;
  int on, oc, ooh, oow;
  if ((rc = check_dnn(cudnnGetConvolution2dForwardOutputDim(p->fwd.desc, p->x, p->w, &on, &oc, &ooh, &oow),
                      "cudnnGetConvolution2dForwardOutputDim")))
    return rc;
  if (on != n || oc != k || ooh != oh || oow != ow) return bad_argument("conv: cuDNN's output shape differs from out_h/out_w");
  constexpr int kMax = 16;
  int got = 0;
  {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    if ((rc = check_dnn(cudnnGetConvolutionForwardAlgorithm_v7(ctx->dnn, p->x, p->w, p->fwd.desc, p->y, kMax, &got, perf),
                        "cudnnGetConvolutionForwardAlgorithm_v7")))
      return rc;
    if ((rc = collect(perf, got, s, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &p->fwd, [&](int algo, size_t* bytes) {
          return check_dnn(cudnnGetConvolutionForwardWorkspaceSize(ctx->dnn, p->x, p->w, p->fwd.desc, p->y,
                                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes),
                           "cudnnGetConvolutionForwardWorkspaceSize");
        })))
      return rc;
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    if ((rc = check_dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx->dnn, p->w, p->y, p->bwd_data.desc, p->x, kMax, &got, perf),
                        "cudnnGetConvolutionBackwardDataAlgorithm_v7")))
      return rc;
    if ((rc = collect(perf, got, s, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &p->bwd_data, [&](int algo, size_t* bytes) {
          return check_dnn(cudnnGetConvolutionBackwardDataWorkspaceSize(ctx->dnn, p->w, p->y, p->bwd_data.desc, p->x,
                                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes),
                           "cudnnGetConvolutionBackwardDataWorkspaceSize");
        })))
      return rc;
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    if ((rc = check_dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx->dnn, p->x, p->y, p->bwd_filter.desc, p->w, kMax,
                                                                      &got, perf),
                        "cudnnGetConvolutionBackwardFilterAlgorithm_v7")))
      return rc;
    if ((rc = collect(perf, got, s, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &p->bwd_filter, [&](int algo, size_t* bytes) {
          return check_dnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx->dnn, p->x, p->y, p->bwd_filter.desc, p->w,
                                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes),
                           "cudnnGetConvolutionBackwardFilterWorkspaceSize");
        })))
      return rc;
  }
  return 0;
}

// Runs `call(algo, workspace, bytes)` with the direction's current candidate, moving on to the next
// when cuDNN refuses one; the first refusal's error when none runs.
template <typename Call>
int run_direction(HpctuneGpuContext* ctx, const HpctuneConvShape* s, ConvDirection* d, const char* what, Call call) {
  int first_rc = 0;
  char first_error[sizeof g_last_error] = "";
  for (int i = d->current; i < d->count; ++i) {
    const ConvAlgo& a = d->candidates[i];
    int rc = check_dnn(cudnnSetConvolutionMathType(d->desc, s->math == 1 ? a.math : CUDNN_FMA_MATH),
                       "cudnnSetConvolutionMathType");
    if (rc == 0) rc = ensure_workspace(ctx, a.bytes);
    if (rc == 0) rc = check_dnn(call(a.algo, ctx->workspace, a.bytes), what);
    if (rc == 0) {
      d->current = i;
      return 0;
    }
    if (first_rc == 0) {
      first_rc = rc;
      std::memcpy(first_error, g_last_error, sizeof first_error);
    }
  }
  std::memcpy(g_last_error, first_error, sizeof first_error);
  return first_rc != 0 ? first_rc : fail(-1, what, "no algorithm");
}

// The cached plan of a shape (made on first use; the oldest dropped beyond kMaxConvPlans).
int conv_plan(HpctuneGpuContext* ctx, const HpctuneConvShape* s, ConvPlan** out) {
  *out = nullptr;
  if (bad_conv_shape(s)) return bad_argument("conv: shape (sizes, padding, out_h/out_w, math or deterministic)");
  if (int rc = ensure_dnn(ctx)) return rc;
  int count = 0;
  ConvPlan* prev = nullptr;
  for (ConvPlan* p = ctx->plans; p != nullptr; prev = p, p = p->next, ++count) {
    if (std::memcmp(&p->shape, s, sizeof *s) == 0) {
      if (prev != nullptr) {  // to the front
        prev->next = p->next;
        p->next = ctx->plans;
        ctx->plans = p;
      }
      *out = p;
      return 0;
    }
  }
  if (count >= kMaxConvPlans && prev != nullptr) {  // drop the least recently used (the last)
    ConvPlan* before_last = ctx->plans;
    while (before_last->next != prev) before_last = before_last->next;
    before_last->next = nullptr;
    free_plan(prev);
  }
  auto* p = new ConvPlan;
  std::memcpy(&p->shape, s, sizeof *s);
  if (int rc = build_plan(ctx, s, p)) {
    free_plan(p);
    return rc;
  }
  p->next = ctx->plans;
  ctx->plans = p;
  *out = p;
  return 0;
}

int conv_forward(HpctuneGpuContext* ctx, const HpctuneConvShape* s, const float* x, const float* w, float* y) {
  if (x == nullptr || w == nullptr || y == nullptr) return bad_argument("conv_forward: pointers");
  ConvPlan* p = nullptr;
  if (int rc = conv_plan(ctx, s, &p)) return rc;
  const float one = 1.f, zero = 0.f;
  return run_direction(ctx, s, &p->fwd, "cudnnConvolutionForward", [&](int algo, void* ws, size_t bytes) {
    return cudnnConvolutionForward(ctx->dnn, &one, p->x, x, p->w, w, p->fwd.desc, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                   ws, bytes, &zero, p->y, y);
  });
}

int conv_backward_data(HpctuneGpuContext* ctx, const HpctuneConvShape* s, const float* dy, const float* w, float* dx) {
  if (dy == nullptr || w == nullptr || dx == nullptr) return bad_argument("conv_backward_data: pointers");
  ConvPlan* p = nullptr;
  if (int rc = conv_plan(ctx, s, &p)) return rc;
  const float one = 1.f, zero = 0.f;
  return run_direction(ctx, s, &p->bwd_data, "cudnnConvolutionBackwardData", [&](int algo, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardData(ctx->dnn, &one, p->w, w, p->y, dy, p->bwd_data.desc,
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, &zero, p->x, dx);
  });
}

int conv_backward_filter(HpctuneGpuContext* ctx, const HpctuneConvShape* s, const float* x, const float* dy, float* dw) {
  if (x == nullptr || dy == nullptr || dw == nullptr) return bad_argument("conv_backward_filter: pointers");
  ConvPlan* p = nullptr;
  if (int rc = conv_plan(ctx, s, &p)) return rc;
  const float one = 1.f;
  return run_direction(ctx, s, &p->bwd_filter, "cudnnConvolutionBackwardFilter", [&](int algo, void* ws, size_t bytes) {
    return cudnnConvolutionBackwardFilter(ctx->dnn, &one, p->x, x, p->y, dy, p->bwd_filter.desc,
                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes, &one, p->w, dw);
  });
}

#else  // no cuDNN

struct ConvPlan {};
void destroy_conv_plans(HpctuneGpuContext*) {}
constexpr const char* kNoCudnn = "hpctune's CUDA library was built without cuDNN (no cudnn.h/libcudnn at build time)";
int no_cudnn(const char* what) { return fail(-1, what, kNoCudnn); }
int cudnn_version(int64_t* version) {
  if (version != nullptr) *version = 0;
  return no_cudnn("cudnn_version");
}
int conv_forward(HpctuneGpuContext*, const HpctuneConvShape*, const float*, const float*, float*) {
  return no_cudnn("conv_forward");
}
int conv_backward_data(HpctuneGpuContext*, const HpctuneConvShape*, const float*, const float*, float*) {
  return no_cudnn("conv_backward_data");
}
int conv_backward_filter(HpctuneGpuContext*, const HpctuneConvShape*, const float*, const float*, float*) {
  return no_cudnn("conv_backward_filter");
}
#endif

// ---- NCCL (non-blocking communicators; the caller polls and aborts, see the ABI header) --------

#ifdef HPCTUNE_GPU_HAVE_NCCL
static_assert(sizeof(ncclUniqueId) == HPCTUNE_NCCL_UNIQUE_ID_BYTES, "ncclUniqueId is not 128 bytes");

}  // namespace
struct HpctuneNcclComm {
  ncclComm_t comm = nullptr;
  int device = 0;
};
namespace {

int check_nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return 0;  // ncclInProgress: queued, comm_poll tells the rest
  return fail(static_cast<int>(r), what, ncclGetErrorString(r));
}

int nccl_version(int32_t* version) {
  int v = 0;
  if (int rc = check_nccl(ncclGetVersion(&v), "ncclGetVersion")) return rc;
  *version = v;
  return 0;
}

int nccl_unique_id(uint8_t* out) {
  if (out == nullptr) return bad_argument("nccl_unique_id: out");
  ncclUniqueId id;
  if (int rc = check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId")) return rc;
  std::memcpy(out, id.internal, sizeof id.internal);
  return 0;
}

int nccl_comm_init(HpctuneGpuContext* ctx, int32_t nranks, int32_t rank, const uint8_t* id_bytes,
                   HpctuneNcclComm** out) {
  if (out == nullptr) return bad_argument("nccl_comm_init: out");
  *out = nullptr;
  if (ctx == nullptr || id_bytes == nullptr || nranks < 1 || rank < 0 || rank >= nranks)
    return bad_argument("nccl_comm_init: context, id, nranks or rank");
  if (int rc = check_cuda(cudaSetDevice(ctx->device), "cudaSetDevice")) return rc;
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes, sizeof id.internal);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and collectives return at once; comm_poll says when they finish
  auto* comm = new HpctuneNcclComm;
  comm->device = ctx->device;
  ncclResult_t r = ncclCommInitRankConfig(&comm->comm, nranks, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm->comm != nullptr) ncclCommAbort(comm->comm);
    delete comm;
    return check_nccl(r, "ncclCommInitRankConfig");
  }
  *out = comm;
  return 0;
}

int allreduce_sum_f32(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, float* buf, int64_t count) {
  if (comm == nullptr || ctx == nullptr || buf == nullptr || count <= 0)
    return bad_argument("allreduce_sum_f32: communicator, context, buffer or count");
  if (int rc = check_cuda(cudaSetDevice(ctx->device), "cudaSetDevice")) return rc;
  return check_nccl(ncclAllReduce(buf, buf, static_cast<size_t>(count), ncclFloat32, ncclSum, comm->comm, ctx->stream),
                    "ncclAllReduce");
}

int comm_poll(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, int32_t* state) {
  if (state == nullptr) return bad_argument("comm_poll: state");
  *state = HPCTUNE_NCCL_ERROR;
  if (comm == nullptr || ctx == nullptr) return bad_argument("comm_poll: communicator or context");
  ncclResult_t async = ncclSuccess;
  if (int rc = check_nccl(ncclCommGetAsyncError(comm->comm, &async), "ncclCommGetAsyncError")) return rc;
  if (async == ncclInProgress) {
    *state = HPCTUNE_NCCL_IN_PROGRESS;
    return 0;
  }
  if (async != ncclSuccess) return fail(static_cast<int>(async), "NCCL communicator", ncclGetErrorString(async));
  cudaError_t e = cudaStreamQuery(ctx->stream);
  if (e == cudaErrorNotReady) {
    *state = HPCTUNE_NCCL_IN_PROGRESS;
    return 0;
  }
  if (int rc = check_cuda(e, "cudaStreamQuery")) return rc;
  *state = HPCTUNE_NCCL_DONE;
  return 0;
}

int comm_abort(HpctuneNcclComm* comm) {
  if (comm == nullptr) return 0;
  int rc = check_nccl(ncclCommAbort(comm->comm), "ncclCommAbort");
  delete comm;
  return rc;
}

int comm_destroy(HpctuneNcclComm* comm) {
  if (comm == nullptr) return 0;
  cudaSetDevice(comm->device);
  // Finalize is non-blocking too: wait for it at most 10 s, then abort rather than hang.
  ncclResult_t r = ncclCommFinalize(comm->comm);
  ncclResult_t async = r;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (r == ncclInProgress || r == ncclSuccess) {
    if (ncclCommGetAsyncError(comm->comm, &async) != ncclSuccess || async != ncclInProgress) break;
    if (std::chrono::steady_clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if ((r != ncclSuccess && r != ncclInProgress) || async != ncclSuccess) {
    int rc = fail(static_cast<int>(async == ncclInProgress ? ncclInProgress : async), "ncclCommFinalize",
                  async == ncclInProgress ? "did not finish in 10 s; aborted" : ncclGetErrorString(async));
    ncclCommAbort(comm->comm);
    delete comm;
    return rc;
  }
  int rc = check_nccl(ncclCommDestroy(comm->comm), "ncclCommDestroy");
  delete comm;
  return rc;
}

// Point to point (ABI 4): ncclGroupStart/End are this thread's, as in NCCL.
int nccl_group_start() { return check_nccl(ncclGroupStart(), "ncclGroupStart"); }
int nccl_group_end() { return check_nccl(ncclGroupEnd(), "ncclGroupEnd"); }
int send_f32(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, const float* buf, int64_t count, int32_t peer) {
  if (comm == nullptr || ctx == nullptr || buf == nullptr || count <= 0 || peer < 0)
    return bad_argument("send_f32: communicator, context, buffer, count or peer");
  if (int rc = check_cuda(cudaSetDevice(ctx->device), "cudaSetDevice")) return rc;
  return check_nccl(ncclSend(buf, static_cast<size_t>(count), ncclFloat32, peer, comm->comm, ctx->stream), "ncclSend");
}
int recv_f32(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, float* buf, int64_t count, int32_t peer) {
  if (comm == nullptr || ctx == nullptr || buf == nullptr || count <= 0 || peer < 0)
    return bad_argument("recv_f32: communicator, context, buffer, count or peer");
  if (int rc = check_cuda(cudaSetDevice(ctx->device), "cudaSetDevice")) return rc;
  return check_nccl(ncclRecv(buf, static_cast<size_t>(count), ncclFloat32, peer, comm->comm, ctx->stream), "ncclRecv");
}
#else
constexpr const char* kNoNccl = "hpctune's CUDA library was built without NCCL (no nccl.h/libnccl at build time)";
int no_nccl(const char* what) { return fail(-1, what, kNoNccl); }
int nccl_version(int32_t* version) {
  if (version != nullptr) *version = 0;
  return no_nccl("nccl_version");
}
int nccl_unique_id(uint8_t*) { return no_nccl("nccl_unique_id"); }
int nccl_comm_init(HpctuneGpuContext*, int32_t, int32_t, const uint8_t*, HpctuneNcclComm** out) {
  if (out != nullptr) *out = nullptr;
  return no_nccl("nccl_comm_init");
}
int allreduce_sum_f32(HpctuneNcclComm*, HpctuneGpuContext*, float*, int64_t) { return no_nccl("allreduce_sum_f32"); }
int comm_poll(HpctuneNcclComm*, HpctuneGpuContext*, int32_t* state) {
  if (state != nullptr) *state = HPCTUNE_NCCL_ERROR;
  return no_nccl("comm_poll");
}
int comm_abort(HpctuneNcclComm*) { return no_nccl("comm_abort"); }
int comm_destroy(HpctuneNcclComm*) { return no_nccl("comm_destroy"); }
int nccl_group_start() { return no_nccl("nccl_group_start"); }
int nccl_group_end() { return no_nccl("nccl_group_end"); }
int send_f32(HpctuneNcclComm*, HpctuneGpuContext*, const float*, int64_t, int32_t) { return no_nccl("send_f32"); }
int recv_f32(HpctuneNcclComm*, HpctuneGpuContext*, float*, int64_t, int32_t) { return no_nccl("recv_f32"); }
#endif

// ---- packed models (kernels in cuda_packed.cu) ---------------------------------------------------

int packed_result(const hpctune_cuda_packed::PackedStatus& s) {
  using K = hpctune_cuda_packed::PackedStatus;
  switch (s.kind) {
    case K::kOk: return 0;
    case K::kBadArgument: return bad_argument(s.what);
    case K::kCuda: return check_cuda(static_cast<cudaError_t>(s.code), s.what);
    case K::kCublas: return check_blas(static_cast<cublasStatus_t>(s.code), s.what);
  }
  return fail(-1, s.what, "unknown status");
}
int gemm_strided_batched(HpctuneGpuContext* ctx, int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float* a, int64_t sa, const float* b, int64_t sb, float beta, float* c, int64_t sc,
                         int64_t count) {
  return packed_result(hpctune_cuda_packed::gemm_strided_batched(ctx->blas, ta, tb, m, n, k, alpha, a, sa, b, sb, beta,
                                                                 c, sc, count));
}
int packed_bias_activation_forward(HpctuneGpuContext* ctx, float* y, const float* bias, int64_t bias_stride,
                                   int64_t models, int64_t rows, int64_t cols, int32_t relu) {
  return packed_result(
      hpctune_cuda_packed::bias_activation_forward(ctx->stream, y, bias, bias_stride, models, rows, cols, relu));
}
int packed_bias_gradient(HpctuneGpuContext* ctx, const float* dz, float* db, int64_t db_stride, int64_t models,
                         int64_t rows, int64_t cols) {
  return packed_result(hpctune_cuda_packed::bias_gradient(ctx->stream, dz, db, db_stride, models, rows, cols));
}
int packed_softmax_cross_entropy(HpctuneGpuContext* ctx, const float* logits, const int32_t* labels,
                                 int64_t labels_stride, int64_t models, int64_t rows, int64_t classes, float grad_scale,
                                 float* dlogits, float* loss, int32_t* correct) {
  return packed_result(hpctune_cuda_packed::softmax_cross_entropy(ctx->stream, logits, labels, labels_stride, models,
                                                                  rows, classes, grad_scale, dlogits, loss, correct));
}
int packed_sgd_update(HpctuneGpuContext* ctx, float* params, const float* grads, float* velocity, int64_t model_stride,
                      int64_t count, int64_t models, const float* lr, const float* momentum, const float* weight_decay,
                      int32_t nesterov) {
  return packed_result(hpctune_cuda_packed::sgd_update(ctx->stream, params, grads, velocity, model_stride, count,
                                                       models, lr, momentum, weight_decay, nesterov));
}
int packed_gather(HpctuneGpuContext* ctx, const float* images, const int32_t* labels, int64_t set_rows,
                  int64_t features, const int32_t* index, int64_t index_stride, int64_t models, int64_t rows, float* x,
                  int32_t* y) {
  return packed_result(hpctune_cuda_packed::gather(ctx->stream, images, labels, set_rows, features, index,
                                                   index_stride, models, rows, x, y));
}

const HpctuneGpuApi kApi = {
    HPCTUNE_GPU_ABI_VERSION,
    sizeof(HpctuneGpuApi),
    last_error,
    device_count,
    driver_version,
    runtime_version,
    device_properties,
    context_create,
    context_destroy,
    synchronize,
    alloc,
    release,
    copy_to_device,
    copy_to_host,
    fill_zero,
    set_tf32,
    gemm,
    bias_activation_forward,
    relu_backward,
    bias_gradient,
    softmax_cross_entropy,
    sgd_update,
    adam_update,
    nccl_version,
    nccl_unique_id,
    nccl_comm_init,
    allreduce_sum_f32,
    comm_poll,
    comm_abort,
    comm_destroy,
    bias_activation_nchw,
    activation_backward,
    bias_gradient_nchw,
    cudnn_version,
    conv_forward,
    conv_backward_data,
    conv_backward_filter,
    maxpool_forward,
    maxpool_backward,
    dropout_forward,
    dropout_backward,
    f32_to_bf16,
    gemm_bf16,
    gather_rows,
    softmax,
    // packed models
    gemm_strided_batched,
    packed_bias_activation_forward,
    packed_bias_gradient,
    packed_softmax_cross_entropy,
    packed_sgd_update,
    packed_gather,
    // NCCL point to point (ABI 4)
    nccl_group_start,
    nccl_group_end,
    send_f32,
    recv_f32,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const HpctuneGpuApi* hpctune_gpu_api(void) { return &kApi; }
