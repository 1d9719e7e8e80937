// Fused softmax + cross-entropy on the GPU, one block per row of the padded logits (N,Vp); logits
// (and the dlogits written over them) in storage T = float or bf16, arithmetic and losses fp32.
// Pass 1 reads the row once with an online softmax: each thread keeps its running max m and
// sum s of exp(x - m); the block merges them (max first, then the rescaled sums). Pass 2, only
// when a gradient is asked for, overwrites the row with dloss * (softmax - onehot(target)) and
// zeroes the padding [V, Vp), which is therefore never predicted.
//   loss = log(sum_v exp(x_v - max)) - (x_target - max)
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 512;

// --- kernels ---

template <typename T>
__global__ void softmax_cross_entropy_kernel(float* losses, T* logits, const int32_t* targets, int64_t V,
                                             int64_t Vp, float dloss) {
  __shared__ float scratch[kWarpSize];
  const int64_t n = blockIdx.x;
  T* x = logits + n * Vp;  // (Vp)
  const int64_t target = targets[n];
  const float x_target = load_f32(x[target]);  // read before any thread overwrites the row
  float m = -INFINITY, s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float xv = load_f32(x[v]);
    if (xv > m) {
      s = s * expf(m - xv) + 1.0f;
      m = xv;
    } else {
      s += expf(xv - m);
    }
  }
  const float row_max = block_max(m, scratch);
  const float sum = block_sum(m == -INFINITY ? 0.0f : s * expf(m - row_max), scratch);
  if (threadIdx.x == 0) losses[n] = logf(sum) - (x_target - row_max);  // subtract first: both can be huge
  if (dloss == 0.0f) return;
  const float grad_scale = dloss / sum;
  for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
    float g = 0.0f;
    if (v < V) g = expf(load_f32(x[v]) - row_max) * grad_scale - (v == target ? dloss : 0.0f);
    x[v] = store_as<T>(g);
  }
}

template <typename T>
void launch_softmax_cross_entropy(float* losses, T* logits, const int32_t* targets, int64_t N, int64_t V,
                                  int64_t Vp, float dloss, cudaStream_t stream) {
  if (N == 0) return;
  softmax_cross_entropy_kernel<T><<<unsigned(N), kBlock, 0, stream>>>(losses, logits, targets, V, Vp, dloss);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// --- launchers ---

void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                           float dloss, cudaStream_t stream) {
  launch_softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss, stream);
}
void softmax_cross_entropy(float* losses, __nv_bfloat16* logits, const int32_t* targets, int64_t N, int64_t V,
                           int64_t Vp, float dloss, cudaStream_t stream) {
  launch_softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss, stream);
}

}  // namespace tessera::cuda
