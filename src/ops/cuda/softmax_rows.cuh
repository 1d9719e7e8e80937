// One block per row of logits: the softmax statistics of a row and its cross-entropy gradient,
// shared by the whole-vocabulary (cross_entropy.cu) and the vocabulary-parallel (cross_entropy_shard.cu)
// kernels. Storage T = float, bf16 or fp16, arithmetic fp32; W elements per access, kVec<T> when the
// row is 16-byte aligned and `width` is a multiple of W, else 1. Included by .cu files only.
#pragma once

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {

// e^d as 2^(d log2 e): one multiply and the SFU's ex2 (2 ulp, as expf's bound), where expf spends about
// eight instructions on a two-part argument reduction; these kernels take two exponentials an element.
// The multiply and the float log2 e add about |d| 7.3e-8 relative error, 7.3e-7 at d = -10, to ex2's
// 2 ulp. The .ftz form flushes results below 2^-126 to zero (a softmax term that small is nothing beside
// the row's largest, e^0 = 1), which spares the scaling exp2f wraps around ex2 to keep them.
__device__ __forceinline__ float exp_of(float d) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(d * 1.44269504088896341f));
  return e;
}

struct SoftmaxStats {
  float max;  // over x[0, real); -inf when real == 0
  float sum;  // of exp(x - max) over x[0, real); 0 when real == 0
};

// Online softmax over the real columns x[0, real) of a row of `width` >= real elements: each thread
// folds its chunks of W into a running max m and sum s of exp(x - m) (one rescale per chunk:
// m' = max(m, chunk max), s' = s e^(m-m') + sum e^(x-m')); the block then merges them (max, then
// rescaled sums). Every thread of the block gets the row's statistics; scratch holds kWarpSize floats.
// With `keep`, each thread also copies the chunks it reads there, bit for bit, so block_softmax_grad
// can read them back from `keep` in place of the row.
template <int W, typename T>
__device__ SoftmaxStats block_softmax_stats(const T* x, int64_t real, float* scratch, T* keep = nullptr) {
  constexpr int kLoads = 4;  // chunks each thread loads before using any: 64 bytes in flight, not 16
  const int64_t stride = int64_t(blockDim.x) * W;
  float m = -INFINITY, s = 0.0f;
  for (int64_t first = int64_t(threadIdx.x) * W; first < real; first += kLoads * stride) {
    PackedChunk<W, T> chunks[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; u++) {
      const int64_t v0 = first + u * stride;
      if (v0 < real) chunks[u] = load_packed<W>(x + v0);  // inside the row: v0 < real <= width, a multiple of W
    }
#pragma unroll
    for (int u = 0; u < kLoads; u++) {
      const int64_t v0 = first + u * stride;
      if (v0 >= real) break;  // this and the later chunks lie past the row's end: not loaded
      if (keep != nullptr) store_packed<W>(keep + v0, chunks[u]);
      float xv[W];
      widen<W>(xv, chunks[u]);
      // Columns past `real` weigh nothing: -inf adds exp(-inf) = 0, the same sum as skipping them. Only
      // the chunk that holds the row's end has such columns; the others skip the test.
      if (v0 + W > real) {
#pragma unroll
        for (int k = 0; k < W; k++) xv[k] = v0 + k < real ? xv[k] : -INFINITY;
      }
      float chunk_max = -INFINITY;
#pragma unroll
      for (int k = 0; k < W; k++) chunk_max = fmaxf(chunk_max, xv[k]);
      const float m_new = fmaxf(m, chunk_max);
      float sum = m == -INFINITY ? 0.0f : s * exp_of(m - m_new);
#pragma unroll
      for (int k = 0; k < W; k++) sum += exp_of(xv[k] - m_new);
      m = m_new;
      s = sum;
    }
  }
  const float row_max = block_max(m, scratch);
  return {row_max, block_sum(m == -INFINITY ? 0.0f : s * exp_of(m - row_max), scratch)};
}

// Writes the row out[0, width) = dloss * (softmax - onehot(target)) of the logits `in` (the row
// itself, or the copy block_softmax_stats kept: each thread reads back only the chunks it copied) from
// their statistics (max, sum over the whole vocabulary); the padding [real, width) becomes 0 (whatever
// its values in `in`: they are read and discarded), and no column is the target when target lies
// outside [0, real).
template <int W, typename T>
__device__ void block_softmax_grad(T* out, const T* in, int64_t width, int64_t real, int64_t target,
                                   SoftmaxStats stats, float dloss) {
  const float scale = dloss / stats.sum;
  for (int64_t v0 = int64_t(threadIdx.x) * W; v0 < width; v0 += int64_t(blockDim.x) * W) {
    float g[W];
    load_f32_vec<W>(g, in + v0);
#pragma unroll
    for (int k = 0; k < W; k++) g[k] = exp_of(g[k] - stats.max);
    // The target's column and the padding, tested only in the chunks that hold them (whatever the
    // padding's values gave above, inf and NaN too, it becomes 0). The target's e * scale - dloss is
    // one fused multiply-add, rounded once.
    if (v0 + W > real || (target >= v0 && target < v0 + W)) {
#pragma unroll
      for (int k = 0; k < W; k++) {
        const int64_t v = v0 + k;
        g[k] = v < real ? fmaf(g[k], scale, -(v == target ? dloss : 0.0f)) : 0.0f;
      }
    } else {
#pragma unroll
      for (int k = 0; k < W; k++) g[k] *= scale;
    }
    store_f32_vec<W>(out + v0, g);
  }
}

}  // namespace tessera::cuda
