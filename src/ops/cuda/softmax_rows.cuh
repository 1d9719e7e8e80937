// One block per row of logits: the softmax statistics of a row and its cross-entropy gradient,
// shared by the whole-vocabulary (cross_entropy.cu) and the vocabulary-parallel (cross_entropy_shard.cu)
// kernels. Storage T = float, bf16 or fp16, arithmetic fp32; W elements per access, kVec<T> when the
// row is 16-byte aligned and `width` is a multiple of W, else 1. Included by .cu files only.
#pragma once

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {

struct SoftmaxStats {
  float max;  // over x[0, real); -inf when real == 0
  float sum;  // of exp(x - max) over x[0, real); 0 when real == 0
};

// Online softmax over the real columns x[0, real) of a row of `width` >= real elements: each thread
// folds its chunks of W into a running max m and sum s of exp(x - m) (one rescale per chunk:
// m' = max(m, chunk max), s' = s e^(m-m') + sum e^(x-m')); the block then merges them (max, then
// rescaled sums). Every thread of the block gets the row's statistics; scratch holds kWarpSize floats.
template <int W, typename T>
__device__ SoftmaxStats block_softmax_stats(const T* x, int64_t real, float* scratch) {
  float m = -INFINITY, s = 0.0f;
  for (int64_t v0 = int64_t(threadIdx.x) * W; v0 < real; v0 += int64_t(blockDim.x) * W) {
    float xv[W];
    load_f32_vec<W>(xv, x + v0);  // inside the row: v0 < real <= width, width a multiple of W
    float chunk_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < W; k++)
      if (v0 + k < real) chunk_max = fmaxf(chunk_max, xv[k]);
    const float m_new = fmaxf(m, chunk_max);
    float sum = m == -INFINITY ? 0.0f : s * expf(m - m_new);
#pragma unroll
    for (int k = 0; k < W; k++)
      if (v0 + k < real) sum += expf(xv[k] - m_new);
    m = m_new;
    s = sum;
  }
  const float row_max = block_max(m, scratch);
  return {row_max, block_sum(m == -INFINITY ? 0.0f : s * expf(m - row_max), scratch)};
}

// Overwrites the row x[0, width) with dloss * (softmax - onehot(target)) from its statistics (max,
// sum over the whole vocabulary); the padding [real, width) becomes 0, and no column is the target
// when target lies outside [0, real).
template <int W, typename T>
__device__ void block_softmax_grad(T* x, int64_t width, int64_t real, int64_t target, SoftmaxStats stats,
                                   float dloss) {
  const float scale = dloss / stats.sum;
  for (int64_t v0 = int64_t(threadIdx.x) * W; v0 < width; v0 += int64_t(blockDim.x) * W) {
    float g[W];
    load_f32_vec<W>(g, x + v0);
#pragma unroll
    for (int k = 0; k < W; k++) {
      const int64_t v = v0 + k;
      g[k] = v < real ? expf(g[k] - stats.max) * scale - (v == target ? dloss : 0.0f) : 0.0f;
    }
    store_f32_vec<W>(x + v0, g);
  }
}

}  // namespace tessera::cuda
