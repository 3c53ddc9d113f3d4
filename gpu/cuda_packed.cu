// The kernels of packed models (gpu/gpu_packed_mlp.h): `models` same-shape dense networks trained as
// one batched model, each buffer holding the models one after another. Compiled into
// libhpctune_gpu_cuda.so beside cuda_library.cu, whose table entries (packed_*, gemm_strided_batched)
// call these. Every kernel takes the model from blockIdx.y, so one launch covers every model; each
// mirrors its single-model kernel in cuda_library.cu (the same arithmetic in the same order, so a
// packed model's elementwise results equal a GpuMlp's bit for bit; only the GEMMs may differ in
// rounding, as cuBLAS picks its own algorithm for the batched call).
#include "gpu/cuda_packed.h"
#include "gpu/cuda_row_softmax.cuh"

#include <cmath>

namespace hpctune_cuda_packed {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxModels = 4096;  // grid y is at most 65,535
constexpr int64_t kMaxSize = int64_t(1) << 31;

PackedStatus bad(const char* what) { return {PackedStatus::kBadArgument, -1, what}; }
PackedStatus launched(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return {};
  return {PackedStatus::kCuda, static_cast<int>(e), what};
}
bool in_size(int64_t v) { return v >= 1 && v < kMaxSize; }
bool models_ok(int64_t models) { return models >= 1 && models <= kMaxModels; }
// Blocks along x for `count` elements per model; grid-stride loops cover the rest.
unsigned blocks_for(int64_t count) {
  int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 8192 ? b : 8192);
}

__global__ void bias_activation_kernel(float* y, const float* bias, int64_t bias_stride, int64_t rows, int64_t cols,
                                       int relu) {
  const int64_t model = blockIdx.y;
  const int64_t n = rows * cols;
  float* ym = y + model * n;
  const float* bm = bias + model * bias_stride;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = ym[i] + bm[i % cols];
    ym[i] = relu && v < 0.f ? 0.f : v;
  }
}

// One thread per (model, column), summing down the rows as bias_gradient_kernel does (db was zero there).
__global__ void bias_gradient_kernel(const float* dz, float* db, int64_t db_stride, int64_t rows, int64_t cols) {
  const int64_t model = blockIdx.y;
  const float* dm = dz + model * rows * cols;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int64_t r = 0; r < rows; ++r) sum += dm[r * cols + c];
    db[model * db_stride + c] = 0.f + sum;
  }
}

// One block per (row, model): as softmax_xent_kernel, with the model's labels, loss and count.
__global__ void softmax_xent_kernel(const float* logits, const int32_t* labels, int64_t labels_stride, int64_t rows,
                                    int64_t classes, float grad_scale, float* dlogits, float* loss, int32_t* correct) {
  __shared__ float shared[32];
  const int64_t model = blockIdx.y;
  const int64_t row = blockIdx.x;
  const int64_t at = (model * rows + row) * classes;
  const float* z = logits + at;
  const int label = labels[model * labels_stride + row];
  const hpctune_cuda::RowSoftmax st = hpctune_cuda::row_softmax(z, classes, shared);
  const float m = st.max, s = st.sum;
  if (dlogits != nullptr) {
    const float inv = 1.f / s;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      dlogits[at + c] = grad_scale * (expf(z[c] - m) * inv - (c == label ? 1.f : 0.f));
  }
  if (threadIdx.x == 0) {
    atomicAdd(loss + model, logf(s) + m - z[label]);
    if (st.argmax == label) atomicAdd(correct + model, 1);
  }
}

// As sgd_kernel with momentum, each model with its own lr, momentum and weight decay.
__global__ void sgd_kernel(float* p, const float* grad, float* v, int64_t model_stride, int64_t count, const float* lrs,
                           const float* momenta, const float* decays, int nesterov) {
  const int64_t model = blockIdx.y;
  const float lr = lrs[model], momentum = momenta[model], wd = decays != nullptr ? decays[model] : 0.f;
  float* pm = p + model * model_stride;
  const float* gm = grad + model * model_stride;
  float* vm = v + model * model_stride;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float g = gm[i] + wd * pm[i];
    if (momentum == 0.f) {  // nn::Optimizer without momentum: p -= lr * g (the velocity stays unused)
      pm[i] -= lr * g;
      continue;
    }
    float vi = momentum * vm[i] + g;
    vm[i] = vi;
    pm[i] -= lr * (nesterov ? g + momentum * vi : vi);
  }
}

// One block per (row, model): copies the indexed image and label.
__global__ void gather_kernel(const float* images, const int32_t* labels, int64_t set_rows, int64_t features,
                              const int32_t* index, int64_t index_stride, int64_t rows, float* x, int32_t* y) {
  const int64_t model = blockIdx.y;
  const int64_t row = blockIdx.x;
  const int64_t j = index[model * index_stride + row];
  if (j < 0 || j >= set_rows) return;
  const float* src = images + j * features;
  float* dst = x + (model * rows + row) * features;
  for (int64_t f = threadIdx.x; f < features; f += blockDim.x) dst[f] = src[f];
  if (threadIdx.x == 0) y[model * rows + row] = labels[j];
}

}  // namespace

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first, n and m swapped.
PackedStatus gemm_strided_batched(cublasHandle_t blas, int32_t transpose_a, int32_t transpose_b, int64_t m, int64_t n,
                                  int64_t k, float alpha, const float* a, int64_t stride_a, const float* b,
                                  int64_t stride_b, float beta, float* c, int64_t stride_c, int64_t batch_count) {
  if (!in_size(m) || !in_size(n) || !in_size(k) || !models_ok(batch_count) || stride_a < 0 || stride_b < 0 ||
      stride_c < 1 || a == nullptr || b == nullptr || c == nullptr)
    return bad("gemm_strided_batched: sizes, strides or pointers");
  const int lda = static_cast<int>(transpose_a ? m : k);
  const int ldb = static_cast<int>(transpose_b ? k : n);
  cublasStatus_t s = cublasSgemmStridedBatched(
      blas, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb, stride_b, a, lda, stride_a, &beta, c,
      static_cast<int>(n), stride_c, static_cast<int>(batch_count));
  if (s != CUBLAS_STATUS_SUCCESS) return {PackedStatus::kCublas, static_cast<int>(s), "cublasSgemmStridedBatched"};
  return {};
}

PackedStatus bias_activation_forward(cudaStream_t stream, float* y, const float* bias, int64_t bias_stride,
                                     int64_t models, int64_t rows, int64_t cols, int32_t relu) {
  if (!models_ok(models) || !in_size(rows) || !in_size(cols) || !in_size(rows * cols) || bias_stride < 0 ||
      y == nullptr || bias == nullptr)
    return bad("packed_bias_activation_forward: sizes or pointers");
  bias_activation_kernel<<<dim3(blocks_for(rows * cols), unsigned(models)), kThreads, 0, stream>>>(y, bias, bias_stride,
                                                                                                  rows, cols, relu);
  return launched("packed_bias_activation_forward");
}

PackedStatus bias_gradient(cudaStream_t stream, const float* dz, float* db, int64_t db_stride, int64_t models,
                           int64_t rows, int64_t cols) {
  if (!models_ok(models) || !in_size(rows) || !in_size(cols) || db_stride < cols || dz == nullptr || db == nullptr)
    return bad("packed_bias_gradient: sizes or pointers");
  bias_gradient_kernel<<<dim3(blocks_for(cols), unsigned(models)), kThreads, 0, stream>>>(dz, db, db_stride, rows, cols);
  return launched("packed_bias_gradient");
}

PackedStatus softmax_cross_entropy(cudaStream_t stream, const float* logits, const int32_t* labels,
                                   int64_t labels_stride, int64_t models, int64_t rows, int64_t classes,
                                   float grad_scale, float* dlogits, float* loss, int32_t* correct) {
  if (!models_ok(models) || !in_size(rows) || !in_size(classes) || labels_stride < 0 || logits == nullptr ||
      labels == nullptr || loss == nullptr || correct == nullptr)
    return bad("packed_softmax_cross_entropy: sizes or pointers");
  const int threads = classes >= 256 ? 256 : 32 * static_cast<int>((classes + 31) / 32);
  softmax_xent_kernel<<<dim3(unsigned(rows), unsigned(models)), threads, 0, stream>>>(
      logits, labels, labels_stride, rows, classes, grad_scale, dlogits, loss, correct);
  return launched("packed_softmax_cross_entropy");
}

PackedStatus sgd_update(cudaStream_t stream, float* params, const float* grads, float* velocity, int64_t model_stride,
                        int64_t count, int64_t models, const float* lr, const float* momentum,
                        const float* weight_decay, int32_t nesterov) {
  if (!models_ok(models) || !in_size(count) || model_stride < count || params == nullptr || grads == nullptr ||
      velocity == nullptr || lr == nullptr || momentum == nullptr)
    return bad("packed_sgd_update: sizes or pointers (the velocity, lr and momentum arrays are required)");
  sgd_kernel<<<dim3(blocks_for(count), unsigned(models)), kThreads, 0, stream>>>(params, grads, velocity, model_stride,
                                                                                count, lr, momentum, weight_decay,
                                                                                nesterov);
  return launched("packed_sgd_update");
}

PackedStatus gather(cudaStream_t stream, const float* images, const int32_t* labels, int64_t set_rows,
                    int64_t features, const int32_t* index, int64_t index_stride, int64_t models, int64_t rows,
                    float* x, int32_t* y) {
  if (!models_ok(models) || !in_size(rows) || !in_size(features) || !in_size(set_rows) || index_stride < 0 ||
      images == nullptr || labels == nullptr || index == nullptr || x == nullptr || y == nullptr)
    return bad("packed_gather: sizes or pointers");
  const int threads = features >= 256 ? 256 : 32 * static_cast<int>((features + 31) / 32);
  gather_kernel<<<dim3(unsigned(rows), unsigned(models)), threads, 0, stream>>>(images, labels, set_rows, features,
                                                                               index, index_stride, rows, x, y);
  return launched("packed_gather");
}

}  // namespace hpctune_cuda_packed
