/* The C interface between hpctune and its CUDA library (libhpctune_gpu_cuda.so, gpu/cuda_library.cu).
 *
 * The library exports one symbol, hpctune_gpu_api(), returning a table of functions. hpctune never
 * links the library: gpu/gpu_backend.cpp dlopen()s it when a GPU backend is asked for and checks
 * abi_version and struct_size before using the table, so a binary built without CUDA, or run on a
 * machine without a driver, still starts. Plain C (no project header, no CUDA header), so both sides
 * compile it.
 *
 * Conventions: every function returns 0 on success and a nonzero code otherwise (the CUDA or cuBLAS
 * status, or -1 for a bad argument); last_error() then gives the message of this thread's latest
 * failure. Pointers named d_* are device memory from alloc(); work is queued on the context's
 * stream and synchronize() waits for it (and reports an asynchronous kernel fault). Matrices are
 * row-major, as in nn/ (nn/layers.h): [rows, cols] with leading dimension cols.
 */
#ifndef HPCTUNE_GPU_LIBRARY_ABI_H
#define HPCTUNE_GPU_LIBRARY_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HPCTUNE_GPU_ABI_VERSION 4u /* 2: the NCCL entries; 3: the GPU network (conv, pooling, dropout, bf16, ...) and packed models; 4: NCCL send/receive */
#define HPCTUNE_GPU_API_SYMBOL "hpctune_gpu_api"

typedef struct HpctuneGpuDeviceProps {
  char name[256];
  uint64_t memory_bytes;
  int32_t compute_major, compute_minor;
  int32_t multiprocessors;
  char pci_bus_id[32];
} HpctuneGpuDeviceProps;

typedef struct HpctuneGpuContext HpctuneGpuContext; /* a device, a stream and a cuBLAS handle */
typedef struct HpctuneNcclComm HpctuneNcclComm;       /* an NCCL communicator (non-blocking mode) */

#define HPCTUNE_NCCL_UNIQUE_ID_BYTES 128 /* sizeof(ncclUniqueId) */
/* comm_poll's states. */
#define HPCTUNE_NCCL_DONE 0
#define HPCTUNE_NCCL_IN_PROGRESS 1
#define HPCTUNE_NCCL_ERROR 2

/* Activations of bias_activation_nchw and activation_backward (nn/'s none|relu|tanh|sigmoid). */
#define HPCTUNE_ACT_NONE 0
#define HPCTUNE_ACT_RELU 1
#define HPCTUNE_ACT_TANH 2
#define HPCTUNE_ACT_SIGMOID 3

/* One convolution for the cuDNN entries: x [n, c, h, w], w [filters, c, kernel, kernel] (OIHW),
 * y [n, filters, out_h, out_w], all NCHW fp32; `pad` zeros on every side (cuDNN pads symmetrically),
 * so out_h = (h + 2 pad - kernel) / stride + 1 (the entries check it). math: 0 strict fp32
 * (CUDNN_FMA_MATH), 1 TF32 tensor cores (CUDNN_TENSOR_OP_MATH: fp32 data
 * in TF32, never down-converted to fp16 as _ALLOW_CONVERSION would permit). deterministic: 1
 * picks only algorithms cuDNN reports deterministic. No padding between the fields (88 bytes). */
typedef struct HpctuneConvShape {
  int64_t n, c, h, w;
  int64_t filters, kernel, stride, pad;
  int64_t out_h, out_w;
  int32_t math, deterministic;
} HpctuneConvShape;

typedef struct HpctuneGpuApi {
  uint32_t abi_version; /* HPCTUNE_GPU_ABI_VERSION */
  uint32_t struct_size; /* sizeof(HpctuneGpuApi) */

  const char* (*last_error)(void);

  /* The devices this process may use (after CUDA_VISIBLE_DEVICES). No driver or no device is a
   * failure of device_count(): *count is 0 and last_error() says why (cudaGetDeviceCount's error). */
  int (*device_count)(int32_t* count);
  int (*driver_version)(int32_t* version);  /* cudaDriverGetVersion: 0 when no driver is installed */
  int (*runtime_version)(int32_t* version); /* cudaRuntimeGetVersion, e.g. 13000 */
  int (*device_properties)(int32_t device, HpctuneGpuDeviceProps* out);

  int (*context_create)(int32_t device, HpctuneGpuContext** out);
  void (*context_destroy)(HpctuneGpuContext* ctx);
  int (*synchronize)(HpctuneGpuContext* ctx);
  int (*alloc)(HpctuneGpuContext* ctx, size_t bytes, void** d_out);
  int (*release)(HpctuneGpuContext* ctx, void* d_ptr);
  int (*copy_to_device)(HpctuneGpuContext* ctx, void* d_dst, const void* src, size_t bytes);
  int (*copy_to_host)(HpctuneGpuContext* ctx, void* dst, const void* d_src, size_t bytes); /* waits */
  int (*fill_zero)(HpctuneGpuContext* ctx, void* d_ptr, size_t bytes);
  /* 1: TF32 tensor cores for fp32 GEMMs; 0: strict fp32 (the default). */
  int (*set_tf32)(HpctuneGpuContext* ctx, int32_t enabled);

  /* C[m, n] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [m, k] (A is [k, m] when
   * transpose_a), op(B) is [k, n] (B is [n, k] when transpose_b). cuBLAS SGEMM. */
  int (*gemm)(HpctuneGpuContext* ctx, int32_t transpose_a, int32_t transpose_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float* d_a, const float* d_b, float beta, float* d_c);
  /* y[rows, cols] += bias[cols], then y = max(y, 0) when relu: one pass (the dense layer's epilogue). */
  int (*bias_activation_forward)(HpctuneGpuContext* ctx, float* d_y, const float* d_bias, int64_t rows, int64_t cols,
                                 int32_t relu);
  /* dz = dy where y > 0, else 0 (ReLU's backward written in terms of its output y). */
  int (*relu_backward)(HpctuneGpuContext* ctx, const float* d_y, const float* d_dy, float* d_dz, int64_t count);
  /* db[cols] += sum over rows of dz[rows, cols]. */
  int (*bias_gradient)(HpctuneGpuContext* ctx, const float* d_dz, float* d_db, int64_t rows, int64_t cols);
  /* Softmax cross-entropy over logits[rows, classes], as nn::softmax_cross_entropy: d_dlogits =
   * grad_scale * (softmax - onehot) (may be null), d_loss[0] += summed loss, d_correct[0] += count of
   * rows whose largest logit is the label. Labels in [0, classes). */
  int (*softmax_cross_entropy)(HpctuneGpuContext* ctx, const float* d_logits, const int32_t* d_labels, int64_t rows,
                               int64_t classes, float grad_scale, float* d_dlogits, float* d_loss,
                               int32_t* d_correct);
  /* SGD as nn::Optimizer (PyTorch 1.13): g = grad + weight_decay * p; v = momentum * v + g (v starts
   * at 0, so v_1 = g); p -= lr * (nesterov ? g + momentum * v : v). momentum 0: d_velocity may be
   * null and p -= lr * g. */
  int (*sgd_update)(HpctuneGpuContext* ctx, float* d_params, const float* d_grads, float* d_velocity, int64_t count,
                    float lr, float momentum, float weight_decay, int32_t nesterov);
  /* Adam and AdamW as nn::Optimizer (PyTorch 1.13), step t >= 1 (counted by the caller, as
   * nn::Optimizer counts it): Adam g = grad + wd * p; AdamW p *= 1 - lr * wd first, g = grad; then
   * m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). */
  int (*adam_update)(HpctuneGpuContext* ctx, float* d_params, const float* d_grads, float* d_m, float* d_v,
                     int64_t count, float lr, float beta1, float beta2, float eps, float weight_decay,
                     int32_t decoupled, int64_t step);

  /* ---- NCCL (ABI 2). A library built without NCCL has every entry, and each fails with
   * "built without NCCL" (nccl_version: *version = 0). Nothing here blocks inside a collective: the
   * communicator is created non-blocking (ncclConfig_t.blocking = 0), so comm_init and
   * allreduce_sum_f32 return once queued, and the caller polls comm_poll() against its own deadline
   * and calls comm_abort() on an error or when the deadline passes (a peer that never joins or died). */
  int (*nccl_version)(int32_t* version); /* ncclGetVersion, e.g. 22809 for 2.28.9 */
  /* ncclGetUniqueId: rank 0 makes it and sends the bytes to the other ranks (the control path). */
  int (*nccl_unique_id)(uint8_t out[HPCTUNE_NCCL_UNIQUE_ID_BYTES]);
  /* ncclCommInitRankConfig (non-blocking) on ctx's device; the communicator is ready when comm_poll
   * says done. *out is null on failure. */
  int (*nccl_comm_init)(HpctuneGpuContext* ctx, int32_t nranks, int32_t rank,
                        const uint8_t id[HPCTUNE_NCCL_UNIQUE_ID_BYTES], HpctuneNcclComm** out);
  /* In-place sum of d_buf[count] over the ranks, queued on ctx's stream. */
  int (*allreduce_sum_f32)(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, float* d_buf, int64_t count);
  /* Never waits: *state = HPCTUNE_NCCL_ERROR when ncclCommGetAsyncError reports an error or the
   * stream faulted (rc nonzero, last_error says which), IN_PROGRESS while the communicator's init or
   * the stream's work runs (ncclInProgress, cudaErrorNotReady), DONE otherwise. */
  int (*comm_poll)(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, int32_t* state);
  /* ncclCommAbort: stops the communicator's kernels and frees it (comm is gone after the call). */
  int (*comm_abort)(HpctuneNcclComm* comm);
  /* ncclCommFinalize + ncclCommDestroy of a communicator whose work is done; frees it. */
  int (*comm_destroy)(HpctuneNcclComm* comm);

  /* ---- the GPU network (ABI 3): gpu/gpu_network.h. Sizes are checked (every count >= 1 and
   * below 2^31 elements a call where a kernel indexes with int). ---- */
  /* y[n, channels, spatial] += bias[channels] (bias may be null: no add), then the activation
   * (HPCTUNE_ACT_*): the dense layer's epilogue (channels = units, spatial = 1) and the conv's. */
  int (*bias_activation_nchw)(HpctuneGpuContext* ctx, float* d_y, const float* d_bias, int64_t n, int64_t channels,
                              int64_t spatial, int32_t activation);
  /* dz = dy * act'(z) written in terms of the output y, as nn::activation_backward (NONE copies dy).
   * dz may alias dy. */
  int (*activation_backward)(HpctuneGpuContext* ctx, const float* d_y, const float* d_dy, float* d_dz, int64_t count,
                             int32_t activation);
  /* db[channels] += sum over n and spatial of dz[n, channels, spatial]: one block per channel, a
   * fixed summation order (deterministic, no atomics). */
  int (*bias_gradient_nchw)(HpctuneGpuContext* ctx, const float* d_dz, float* d_db, int64_t n, int64_t channels,
                            int64_t spatial);
  /* cudnnGetVersion (e.g. 91400); a library built without cuDNN: *version = 0 and a failure saying so,
   * as every conv entry. The context's cuDNN handle is made on the first conv call. */
  int (*cudnn_version)(int64_t* version);
  /* y = conv(x, w) (overwrites; no bias: bias_activation_nchw adds it). */
  int (*conv_forward)(HpctuneGpuContext* ctx, const HpctuneConvShape* shape, const float* d_x, const float* d_w,
                      float* d_y);
  /* dx = conv_transpose(dy, w) (overwrites). */
  int (*conv_backward_data)(HpctuneGpuContext* ctx, const HpctuneConvShape* shape, const float* d_dy, const float* d_w,
                            float* d_dx);
  /* dw += dL/dw from x and dy (ADDS into dw, as nn's gradients). */
  int (*conv_backward_filter)(HpctuneGpuContext* ctx, const HpctuneConvShape* shape, const float* d_x,
                              const float* d_dy, float* d_dw);
  /* Max pooling over [n, c, h, w], size x size windows every stride, no padding: out (h - size) /
   * stride + 1, as nn's maxpool. d_argmax [n, c, out_h, out_w] (may be null in inference) gets the
   * index in its h x w plane of each window's first largest value. */
  int (*maxpool_forward)(HpctuneGpuContext* ctx, const float* d_x, float* d_y, int32_t* d_argmax, int64_t n,
                         int64_t c, int64_t h, int64_t w, int64_t size, int64_t stride);
  /* dx (overwritten, [n, c, h, w]) = the sum of dy over the windows whose argmax is that element
   * (a gather per input element: no atomics). */
  int (*maxpool_backward)(HpctuneGpuContext* ctx, const float* d_dy, const int32_t* d_argmax, float* d_dx, int64_t n,
                          int64_t c, int64_t h, int64_t w, int64_t size, int64_t stride);
  /* Inverted dropout: element i is dropped when the high 32 bits of splitmix64(splitmix64(seed ^
   * splitmix64(offset)) + i) are below rate * 2^32, else scaled by float(1 / (1 - rate)); rate in
   * [0, 1). The backward recomputes the same mask from (seed, offset): dx = dy * mask. In place is fine. */
  int (*dropout_forward)(HpctuneGpuContext* ctx, const float* d_x, float* d_y, int64_t count, double rate,
                         uint64_t seed, uint64_t offset);
  int (*dropout_backward)(HpctuneGpuContext* ctx, const float* d_dy, float* d_dx, int64_t count, double rate,
                          uint64_t seed, uint64_t offset);
  /* dst[i] = src[i] rounded to bf16 (round to nearest even); dst holds the bf16 bit patterns. */
  int (*f32_to_bf16)(HpctuneGpuContext* ctx, const float* d_src, uint16_t* d_dst, int64_t count);
  /* gemm's contract with bf16 A and B, fp32 C and fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F). */
  int (*gemm_bf16)(HpctuneGpuContext* ctx, int32_t transpose_a, int32_t transpose_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const uint16_t* d_a, const uint16_t* d_b, float beta, float* d_c);
  /* dst[r, :] = src[index[r], :] and dst_labels[r] = src_labels[index[r]] for r < count; an index
   * outside [0, rows) gives a zero row and label -1 (the caller checks indices first). */
  int (*gather_rows)(HpctuneGpuContext* ctx, const float* d_src, const int32_t* d_src_labels, int64_t rows,
                     int64_t features, const int64_t* d_index, int64_t count, float* d_dst, int32_t* d_dst_labels);
  /* probs[rows, classes] = softmax of each row of logits (nn::softmax_cross_entropy's probs). */
  int (*softmax)(HpctuneGpuContext* ctx, const float* d_logits, int64_t rows, int64_t classes, float* d_probs);

  /* ---- Packed models (gpu/gpu_packed_mlp.h; kernels in gpu/cuda_packed.cu): `models` same-shape
   * networks trained as one batched model. Each buffer holds the models one after another; model
   * i's block starts at i * its stride (in elements). Sizes are bounded: models in [1, 4096], every
   * other size in [1, 2^31). */
  /* For i < batch_count: C_i = alpha * op(A_i) op(B_i) + beta * C_i, row-major as gemm(), with
   * X_i = X + i * stride_x (a stride of 0 shares one matrix, e.g. one test batch for every model).
   * cublasSgemmStridedBatched; TF32 when set_tf32 is on. */
  int (*gemm_strided_batched)(HpctuneGpuContext* ctx, int32_t transpose_a, int32_t transpose_b, int64_t m, int64_t n,
                              int64_t k, float alpha, const float* d_a, int64_t stride_a, const float* d_b,
                              int64_t stride_b, float beta, float* d_c, int64_t stride_c, int64_t batch_count);
  /* y[models, rows, cols] += model i's bias (d_bias + i * bias_stride, [cols]), then ReLU when relu. */
  int (*packed_bias_activation_forward)(HpctuneGpuContext* ctx, float* d_y, const float* d_bias, int64_t bias_stride,
                                        int64_t models, int64_t rows, int64_t cols, int32_t relu);
  /* Model i's db (d_db + i * db_stride, [cols]) = sum over rows of dz[i, rows, cols] (overwrites). */
  int (*packed_bias_gradient)(HpctuneGpuContext* ctx, const float* d_dz, float* d_db, int64_t db_stride, int64_t models,
                              int64_t rows, int64_t cols);
  /* softmax_cross_entropy() per model over logits[models, rows, classes], labels of model i at
   * d_labels + i * labels_stride (0: shared); d_loss[i] += model i's summed loss, d_correct[i] += its
   * correct count; d_dlogits [models, rows, classes] may be null. */
  int (*packed_softmax_cross_entropy)(HpctuneGpuContext* ctx, const float* d_logits, const int32_t* d_labels,
                                      int64_t labels_stride, int64_t models, int64_t rows, int64_t classes,
                                      float grad_scale, float* d_dlogits, float* d_loss, int32_t* d_correct);
  /* sgd_update() on `count` values of each model (params/grads/velocity of model i at + i *
   * model_stride), with model i's d_lr[i], d_momentum[i] and d_weight_decay[i] (device arrays;
   * d_weight_decay may be null: no decay). d_velocity is required (momentum 0 gives plain SGD). */
  int (*packed_sgd_update)(HpctuneGpuContext* ctx, float* d_params, const float* d_grads, float* d_velocity,
                           int64_t model_stride, int64_t count, int64_t models, const float* d_lr,
                           const float* d_momentum, const float* d_weight_decay, int32_t nesterov);
  /* For model i and r < rows: j = d_index[i * index_stride + r] (in [0, set_rows)); d_x[i, r, :] =
   * d_images[j, :] ([set_rows, features]), d_y[i, r] = d_labels[j]. The caller checks the indices
   * (GpuPackedDataset does when they are uploaded); a row whose index is out of range is left as it was. */
  int (*packed_gather)(HpctuneGpuContext* ctx, const float* d_images, const int32_t* d_labels, int64_t set_rows,
                       int64_t features, const int32_t* d_index, int64_t index_stride, int64_t models, int64_t rows,
                       float* d_x, int32_t* d_y);

  /* ---- NCCL point to point (ABI 4), for pipelines: ncclSend / ncclRecv of fp32 on a communicator
   * of comm_init, queued on ctx's stream; comm_poll says when they are done, and the watchdog
   * contract above holds (the caller polls against its deadline, aborts on an error or at it). A
   * send to `peer` meets that peer's receive from this rank of the same count, in the order posted.
   * Between nccl_group_start() and nccl_group_end() (this thread's, nestable: ncclGroupStart/End)
   * the calls are queued and start together at the outermost group_end, so a rank may send to and
   * receive from its neighbours at once without deadlock. Built without NCCL: each fails saying so. */
  int (*nccl_group_start)(void);
  int (*nccl_group_end)(void);
  int (*send_f32)(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, const float* d_buf, int64_t count, int32_t peer);
  int (*recv_f32)(HpctuneNcclComm* comm, HpctuneGpuContext* ctx, float* d_buf, int64_t count, int32_t peer);
} HpctuneGpuApi;

typedef const HpctuneGpuApi* (*HpctuneGpuApiEntry)(void);

#ifdef __cplusplus
}
#endif

#endif /* HPCTUNE_GPU_LIBRARY_ABI_H */
