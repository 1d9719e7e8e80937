// Fused softmax + cross-entropy on the GPU, one block per row of the padded logits (N,Vp); logits
// (and the dlogits written over them) in storage T = float, bf16 or fp16, arithmetic and losses fp32.
// Pass 1 reads the row once (16-byte vector loads when aligned) with an online softmax: each thread
// keeps its running max m and sum s of exp(x - m); the block merges them (max, then rescaled sums). Pass 2, only
// when a gradient is asked for, overwrites the row with dloss * (softmax - onehot(target)) and
// zeroes the padding [V, Vp), which is therefore never predicted.
//   loss = log(sum_v exp(x_v - max)) - (x_target - max)
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 512;

// --- kernels ---

// W elements per load: kVec<T> (16 bytes) when the rows are 16-byte aligned, else 1. Each chunk of W
// folds into the running (m, s) with one rescale: m' = max(m, chunk max), s' = s e^(m-m') + sum e^(x-m').
template <int W, typename T>
__global__ void softmax_cross_entropy_kernel(float* losses, T* logits, const int32_t* targets, int64_t V,
                                             int64_t Vp, float dloss) {
  __shared__ float scratch[kWarpSize];
  const int64_t n = blockIdx.x;
  T* x = logits + n * Vp;  // (Vp)
  const int64_t target = targets[n];
  const float x_target = load_f32(x[target]);  // read before any thread overwrites the row
  float m = -INFINITY, s = 0.0f;
  for (int64_t v0 = int64_t(threadIdx.x) * W; v0 < V; v0 += int64_t(blockDim.x) * W) {
    float xv[W];
    load_f32_vec<W>(xv, x + v0);
    float chunk_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < W; k++)
      if (v0 + k < V) chunk_max = fmaxf(chunk_max, xv[k]);
    const float m_new = fmaxf(m, chunk_max);
    float sum = m == -INFINITY ? 0.0f : s * expf(m - m_new);
#pragma unroll
    for (int k = 0; k < W; k++)
      if (v0 + k < V) sum += expf(xv[k] - m_new);
    m = m_new;
    s = sum;
  }
  const float row_max = block_max(m, scratch);
  const float sum = block_sum(m == -INFINITY ? 0.0f : s * expf(m - row_max), scratch);
  if (threadIdx.x == 0) losses[n] = logf(sum) - (x_target - row_max);  // subtract first: both can be huge
  if (dloss == 0.0f) return;
  const float grad_scale = dloss / sum;
  for (int64_t v0 = int64_t(threadIdx.x) * W; v0 < Vp; v0 += int64_t(blockDim.x) * W) {
    float g[W];
    load_f32_vec<W>(g, x + v0);
#pragma unroll
    for (int k = 0; k < W; k++) {
      const int64_t v = v0 + k;
      g[k] = v < V ? expf(g[k] - row_max) * grad_scale - (v == target ? dloss : 0.0f) : 0.0f;
    }
    store_f32_vec<W>(x + v0, g);
  }
}

}  // namespace

// --- launchers ---

template <typename T>
void softmax_cross_entropy(float* losses, T* logits, const int32_t* targets, int64_t N, int64_t V,
                           int64_t Vp, float dloss, cudaStream_t stream) {
  if (N == 0) return;
  if (is_aligned16(logits) && Vp % kVec<T> == 0)
    softmax_cross_entropy_kernel<kVec<T>, T><<<unsigned(N), kBlock, 0, stream>>>(losses, logits, targets, V, Vp, dloss);
  else
    softmax_cross_entropy_kernel<1, T><<<unsigned(N), kBlock, 0, stream>>>(losses, logits, targets, V, Vp, dloss);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                         \
  template void softmax_cross_entropy<T>(float*, T*, const int32_t*, int64_t, int64_t, int64_t, float, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
