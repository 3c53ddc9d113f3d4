// The packed models' kernels (gpu/cuda_packed.cu), as cuda_library.cu's table entries call them:
// CUDA-side only (nvcc), never included by the rest of hpctune. Each function queues its work on
// `stream` (GEMMs on `blas`, already bound to that stream) and returns what went wrong as a
// PackedStatus, which cuda_library.cu turns into its last_error() message and return code.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hpctune_cuda_packed {

struct PackedStatus {
  enum Kind { kOk, kBadArgument, kCuda, kCublas } kind = kOk;
  int code = 0;              // cudaError_t or cublasStatus_t
  const char* what = "";     // the entry and the step that failed
};

PackedStatus gemm_strided_batched(cublasHandle_t blas, int32_t transpose_a, int32_t transpose_b, int64_t m, int64_t n,
                                  int64_t k, float alpha, const float* a, int64_t stride_a, const float* b,
                                  int64_t stride_b, float beta, float* c, int64_t stride_c, int64_t batch_count);
PackedStatus bias_activation_forward(cudaStream_t stream, float* y, const float* bias, int64_t bias_stride,
                                     int64_t models, int64_t rows, int64_t cols, int32_t relu);
PackedStatus bias_gradient(cudaStream_t stream, const float* dz, float* db, int64_t db_stride, int64_t models,
                           int64_t rows, int64_t cols);
PackedStatus softmax_cross_entropy(cudaStream_t stream, const float* logits, const int32_t* labels,
                                   int64_t labels_stride, int64_t models, int64_t rows, int64_t classes,
                                   float grad_scale, float* dlogits, float* loss, int32_t* correct);
PackedStatus sgd_update(cudaStream_t stream, float* params, const float* grads, float* velocity, int64_t model_stride,
                        int64_t count, int64_t models, const float* lr, const float* momentum,
                        const float* weight_decay, int32_t nesterov);
PackedStatus gather(cudaStream_t stream, const float* images, const int32_t* labels, int64_t set_rows,
                    int64_t features, const int32_t* index, int64_t index_stride, int64_t models, int64_t rows,
                    float* x, int32_t* y);

}  // namespace hpctune_cuda_packed
