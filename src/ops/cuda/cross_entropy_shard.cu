// The vocabulary-parallel cross-entropy's local parts on the GPU: one block per row of the shard
// (N,Vs), storage T = float, bf16 or fp16, arithmetic fp32, 16-byte vector accesses when the shard
// is aligned and Vs allows; the row statistics and the gradient are softmax_cross_entropy's
// (softmax_rows.cuh), over the shard's real columns [0, real) and with the global statistics.
#include "core/ignored_target.h"
#include "ops/cuda/cross_entropy_shard_cuda.h"
#include "ops/cuda/softmax_rows.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

template <int W, typename T>
__global__ void stats_kernel(float* max, float* sum_exp, float* target_logit, const T* logits, const int32_t* targets,
                             int64_t Vs, int64_t first_col, int64_t real) {
  __shared__ float scratch[kWarpSize];
  const int64_t n = blockIdx.x;
  const T* x = logits + n * Vs;
  const SoftmaxStats stats = block_softmax_stats<W>(x, real, scratch);
  if (threadIdx.x != 0) return;
  const int64_t t = int64_t(targets[n]) - first_col;
  max[n] = stats.max;
  sum_exp[n] = stats.sum;
  target_logit[n] = t >= 0 && t < real ? load_f32(x[t]) : 0.0f;
}

__global__ void rescale_kernel(float* sum_exp, const float* local_max, const float* global_max, int64_t N) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  sum_exp[n] = local_max[n] == -INFINITY ? 0.0f : sum_exp[n] * exp_of(local_max[n] - global_max[n]);
}

template <int W, typename T>
__global__ void finish_kernel(float* losses, T* logits, const int32_t* targets, const float* max, const float* sum_exp,
                              const float* target_logit, int64_t Vs, int64_t first_col, int64_t real, float dloss) {
  const int64_t n = blockIdx.x;
  const bool ignored = targets[n] == kIgnoredTarget;
  if (threadIdx.x == 0) losses[n] = ignored ? 0.0f : logf(sum_exp[n]) + max[n] - target_logit[n];
  if (dloss == 0.0f) return;
  // An ignored row has no real column: a row of zeros, whatever its logits and statistics (inf, NaN).
  T* row = logits + n * Vs;  // (Vs)
  block_softmax_grad<W>(row, row, Vs, ignored ? 0 : real, int64_t(targets[n]) - first_col, {max[n], sum_exp[n]},
                        dloss);
}

// kVec<T> elements per access when every row of the shard is 16-byte aligned, else 1.
template <typename T>
bool vector_rows(const T* logits, int64_t Vs) {
  return is_aligned16(logits) && Vs % kVec<T> == 0;
}

}  // namespace

template <typename T>
void cross_entropy_shard_stats(float* max, float* sum_exp, float* target_logit, const T* logits,
                               const int32_t* targets, int64_t N, int64_t Vs, int64_t first_col, int64_t real,
                               cudaStream_t stream) {
  if (N == 0) return;
  if (vector_rows(logits, Vs))
    stats_kernel<kVec<T>, T><<<unsigned(N), kBlock, 0, stream>>>(max, sum_exp, target_logit, logits, targets, Vs,
                                                                 first_col, real);
  else
    stats_kernel<1, T><<<unsigned(N), kBlock, 0, stream>>>(max, sum_exp, target_logit, logits, targets, Vs, first_col,
                                                           real);
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
  if (vector_rows(logits, Vs))
    finish_kernel<kVec<T>, T><<<unsigned(N), kBlock, 0, stream>>>(losses, logits, targets, max, sum_exp, target_logit,
                                                                  Vs, first_col, real, dloss);
  else
    finish_kernel<1, T><<<unsigned(N), kBlock, 0, stream>>>(losses, logits, targets, max, sum_exp, target_logit, Vs,
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
