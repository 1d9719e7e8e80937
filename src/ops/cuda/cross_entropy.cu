// Fused softmax + cross-entropy on the GPU, one block per row of the padded logits (N,Vp); logits
// (and the dlogits written over them) in storage T = float, bf16 or fp16, arithmetic and losses fp32.
// Pass 1 reads the row once (16-byte vector loads when aligned) with an online softmax
// (softmax_rows.cuh). Pass 2, only when a gradient is asked for, overwrites the row with
// dloss * (softmax - onehot(target)) and zeroes the padding [V, Vp), which is therefore never predicted.
// When the row fits the shared memory a block may have (GPT-2's 50,304 in bf16 or fp32 on an H100),
// pass 1 keeps a copy there and pass 2 reads that: the logits cross the memory bus twice, not three times.
//   loss = log(sum_v exp(x_v - max)) - (x_target - max); an ignored target's row: loss 0, gradient 0.
#include "core/ignored_target.h"
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/softmax_rows.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 512;

// --- kernels ---

// kKeepRow: dynamic shared memory holds the row (Vp elements of T), 16-byte aligned.
template <int W, bool kKeepRow, typename T>
__global__ void softmax_cross_entropy_kernel(float* losses, T* logits, const int32_t* targets, int64_t V,
                                             int64_t Vp, float dloss) {
  extern __shared__ int4 kept_row[];
  __shared__ float scratch[kWarpSize];
  const int64_t n = blockIdx.x;
  T* x = logits + n * Vp;  // (Vp)
  T* keep = kKeepRow ? reinterpret_cast<T*>(kept_row) : nullptr;
  const int64_t target = targets[n];
  const bool ignored = target == kIgnoredTarget;
  const float x_target = ignored ? 0.0f : load_f32(x[target]);  // read before any thread overwrites the row
  const SoftmaxStats stats = block_softmax_stats<W>(x, V, scratch, keep);
  if (threadIdx.x == 0) losses[n] = ignored ? 0.0f : logf(stats.sum) - (x_target - stats.max);  // subtract first
  if (dloss == 0.0f) return;
  // An ignored row has no real column: a row of zeros, whatever its logits (inf and NaN too).
  block_softmax_grad<W>(x, kKeepRow ? keep : x, Vp, ignored ? 0 : V, target, stats, dloss);
}

}  // namespace

// --- launchers ---

template <typename T>
void softmax_cross_entropy(float* losses, T* logits, const int32_t* targets, int64_t N, int64_t V,
                           int64_t Vp, float dloss, cudaStream_t stream) {
  if (N == 0) return;
  const size_t row_bytes = size_t(Vp) * sizeof(T);
  if (!is_aligned16(logits) || Vp % kVec<T> != 0) {
    softmax_cross_entropy_kernel<1, false, T><<<unsigned(N), kBlock, 0, stream>>>(losses, logits, targets, V, Vp,
                                                                                  dloss);
    CUDA_CHECK_LAUNCH();
  } else if (dloss != 0.0f && row_bytes + sizeof(float) * kWarpSize <= shared_memory_optin_bytes()) {
    launch_with_shared(softmax_cross_entropy_kernel<kVec<T>, true, T>, dim3(unsigned(N)), kBlock, row_bytes, stream,
                       losses, logits, targets, V, Vp, dloss);
  } else {
    softmax_cross_entropy_kernel<kVec<T>, false, T><<<unsigned(N), kBlock, 0, stream>>>(losses, logits, targets, V,
                                                                                        Vp, dloss);
    CUDA_CHECK_LAUNCH();
  }
}

#define INSTANTIATE(T)                                                                                         \
  template void softmax_cross_entropy<T>(float*, T*, const int32_t*, int64_t, int64_t, int64_t, float, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
