// Device helpers shared by the CUDA library's kernels (cuda_library.cu) and the packed models'
// (cuda_packed.cu): a block-wide reduction, and one row of logits' softmax statistics (its max,
// the sum of exp(z - max), and the first column holding the max, as the CPU's argmax: ties go to
// the lower index). Every reduction is a fixed tree of warp shuffles: the same inputs give the
// same bits. Included by .cu files only.
#pragma once

#include <cmath>
#include <cstdint>

namespace hpctune_cuda {

// The block's sum (or max with take_max) of v, on every thread. `shared` holds 32 floats; the block
// is at most 1,024 threads. Every thread of the block must call it.
static __device__ __forceinline__ float block_reduce(float v, float* shared, bool take_max) {
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

struct RowSoftmax {
  float max = 0.f;    // the largest logit
  float sum = 0.f;    // sum of exp(z - max)
  int64_t argmax = 0; // the first column holding max
};

// The statistics of logits z[0..classes), computed by the whole block (one row per block).
static __device__ __forceinline__ RowSoftmax row_softmax(const float* z, int64_t classes, float* shared) {
  RowSoftmax r;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, z[c]);
  r.max = block_reduce(m, shared, true);
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) s += expf(z[c] - r.max);
  r.sum = block_reduce(s, shared, false);
  float first = static_cast<float>(classes);
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    if (z[c] == r.max) first = fminf(first, static_cast<float>(c));
  r.argmax = static_cast<int64_t>(-block_reduce(-first, shared, true));
  return r;
}

}  // namespace hpctune_cuda
