// libhpctune_gpu_cuda.so: the CUDA side of the built-in trainers, behind the C table of
// gpu/gpu_library_abi.h. Only gpu/gpu_backend.cpp loads it (dlopen), so nothing else in hpctune
// needs libcudart or cuBLAS at startup.
//
// What is here: the device inventory, a context (device, stream, cuBLAS handle), memory, cuBLAS
// SGEMM in row-major terms, and the elementwise kernels of a dense network's training step: the
// bias + ReLU epilogue in one pass, ReLU backward, the bias gradient, softmax cross-entropy with its
// gradient (one block per row), and the SGD/momentum update (one pass over parameters, gradients
// and velocity). Each mirrors its CPU reference in nn/ (named at the function in the ABI header).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#ifdef HPCTUNE_GPU_HAVE_NCCL
#include <nccl.h>
#endif

#include "gpu/cuda_packed.h"
#include "gpu/gpu_library_abi.h"

struct HpctuneGpuContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
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

__device__ float block_reduce(float v, float* shared, bool take_max) {
  for (int offset = 16; offset > 0; offset /= 2) {
    float other = __shfl_down_sync(0xffffffffu, v, offset);
    v = take_max ? fmaxf(v, other) : v + other;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  if (warp == 0) {
    v = lane < warps ? shared[lane] : (take_max ? -INFINITY : 0.f);
    for (int offset = 16; offset > 0; offset /= 2) {
      float other = __shfl_down_sync(0xffffffffu, v, offset);
      v = take_max ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

// One block per row: max, sum of exp, loss = log(sum) + max - logit[label], gradient.
__global__ void softmax_xent_kernel(const float* logits, const int32_t* labels, int64_t classes, float grad_scale,
                                    float* dlogits, float* loss, int32_t* correct) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* z = logits + row * classes;
  const int label = labels[row];
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, z[c]);
  m = block_reduce(m, shared, true);
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) s += expf(z[c] - m);
  s = block_reduce(s, shared, false);
  // The first column holding the maximum, as the CPU reference's argmax (ties go to the lower index).
  float first = static_cast<float>(classes);
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    if (z[c] == m) first = fminf(first, static_cast<float>(c));
  first = -block_reduce(-first, shared, true);
  if (dlogits != nullptr) {
    const float inv = 1.f / s;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      dlogits[row * classes + c] = grad_scale * (expf(z[c] - m) * inv - (c == label ? 1.f : 0.f));
  }
  if (threadIdx.x == 0) {
    atomicAdd(loss, logf(s) + m - z[label]);
    if (static_cast<int>(first) == label) atomicAdd(correct, 1);
  }
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
  const int threads = classes >= 256 ? 256 : 32 * static_cast<int>((classes + 31) / 32);
  softmax_xent_kernel<<<static_cast<unsigned>(rows), threads, 0, ctx->stream>>>(logits, labels, classes, grad_scale,
                                                                               dlogits, loss, correct);
  return check_launch("softmax_cross_entropy");
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
    // packed models
    gemm_strided_batched,
    packed_bias_activation_forward,
    packed_bias_gradient,
    packed_softmax_cross_entropy,
    packed_sgd_update,
    packed_gather,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const HpctuneGpuApi* hpctune_gpu_api(void) { return &kApi; }
