// The vocabulary-parallel cross-entropy's local parts on the GPU: one block per row of the shard
// (N,Vs), storage T = float, bf16 or fp16, arithmetic fp32; the stats kernel keeps an online
// softmax per thread (running max m and sum of exp(x - m)) and merges them over the block, as
// softmax_cross_entropy does over a whole row.
#include "ops/cuda/cross_entropy_shard_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

template <typename T>
__global__ void stats_kernel(float* max, float* sum_exp, float* target_logit, const T* logits, const int32_t* targets,
                             int64_t Vs, int64_t first_col, int64_t real) {
  __shared__ float scratch[kWarpSize];
  const int64_t n = blockIdx.x;
  const T* x = logits + n * Vs;
  float m = -INFINITY, s = 0.0f;
  for (int64_t v = threadIdx.x; v < real; v += blockDim.x) {
    const float xv = load_f32(x[v]);
    const float m_new = fmaxf(m, xv);
    s = (m == -INFINITY ? 0.0f : s * expf(m - m_new)) + expf(xv - m_new);
    m = m_new;
  }
  const float row_max = block_max(m, scratch);
  const float sum = block_sum(m == -INFINITY ? 0.0f : s * expf(m - row_max), scratch);
  if (threadIdx.x != 0) return;
  const int64_t t = int64_t(targets[n]) - first_col;
  max[n] = row_max;
  sum_exp[n] = sum;
  target_logit[n] = t >= 0 && t < real ? load_f32(x[t]) : 0.0f;
}

__global__ void rescale_kernel(float* sum_exp, const float* local_max, const float* global_max, int64_t N) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  sum_exp[n] = local_max[n] == -INFINITY ? 0.0f : sum_exp[n] * expf(local_max[n] - global_max[n]);
}

template <typename T>
__global__ void finish_kernel(float* losses, T* logits, const int32_t* targets, const float* max, const float* sum_exp,
                              const float* target_logit, int64_t Vs, int64_t first_col, int64_t real, float dloss) {
  const int64_t n = blockIdx.x;
  if (threadIdx.x == 0) losses[n] = logf(sum_exp[n]) + max[n] - target_logit[n];
  if (dloss == 0.0f) return;
  T* x = logits + n * Vs;
  const float m = max[n], scale = dloss / sum_exp[n];
  const int64_t t = int64_t(targets[n]) - first_col;
  for (int64_t v = threadIdx.x; v < Vs; v += blockDim.x) {
    const float g = v < real ? expf(load_f32(x[v]) - m) * scale - (v == t ? dloss : 0.0f) : 0.0f;
    x[v] = store_as<T>(g);
  }
}

}  // namespace

template <typename T>
void cross_entropy_shard_stats(float* max, float* sum_exp, float* target_logit, const T* logits,
                               const int32_t* targets, int64_t N, int64_t Vs, int64_t first_col, int64_t real,
                               cudaStream_t stream) {
  if (N == 0) return;
  stats_kernel<T><<<unsigned(N), kBlock, 0, stream>>>(max, sum_exp, target_logit, logits, targets, Vs, first_col, real);
  CUDA_CHECK_LAUNCH();
}

void cross_entropy_shard_rescale(float* sum_exp, const float* local_max, const float* global_max, int64_t N,
                                 cudaStream_t stream) {
  if (N == 0) return;
  rescale_kernel<<<unsigned(ceil_div(N, kBlock)), kBlock, 0, stream>>>(sum_exp, local_max, global_max, N);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void cross_entropy_shard_finish(float* losses, T* logits, const int32_t* targets, const float* max,
                                const float* sum_exp, const float* target_logit, int64_t N, int64_t Vs,
                                int64_t first_col, int64_t real, float dloss, cudaStream_t stream) {
  if (N == 0) return;
  finish_kernel<T><<<unsigned(N), kBlock, 0, stream>>>(losses, logits, targets, max, sum_exp, target_logit, Vs,
                                                       first_col, real, dloss);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                          \
  template void cross_entropy_shard_stats<T>(float*, float*, float*, const T*, const int32_t*, int64_t, int64_t, \
                                             int64_t, int64_t, cudaStream_t);                                    \
  template void cross_entropy_shard_finish<T>(float*, T*, const int32_t*, const float*, const float*, const float*, \
                                              int64_t, int64_t, int64_t, int64_t, float, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
