// Attention over a key/value cache on the GPU, for generation: few query rows (Tq is 1 per new
// token) over up to `capacity` cached positions. One block per (b, query head, query row); its warps
// take interleaved keys, each keeping an online softmax (running max, sum and the weighted sum of
// values, HS/32 elements per lane), and the block merges the warps' partial results at the end.
#include "core/error.h"
#include "ops/cuda/attention_kv_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kPerLane = int(kMaxKvHeadSize) / kWarpSize;  // head elements a lane holds

// --- kernels ---

// Row (b, t) of qkv's k and v heads into cache row past + t. One block per row.
template <typename T>
__global__ void append_kv_kernel(T* __restrict__ k_cache, T* __restrict__ v_cache, const T* __restrict__ qkv,
                                 int64_t Tq, int64_t past, int64_t capacity, int64_t NH, int64_t KV, int64_t HS) {
  const int64_t row = blockIdx.x, b = row / Tq, t = row % Tq;
  const T* k = qkv + row * (NH * HS + 2 * KV) + NH * HS;
  const int64_t at = (b * capacity + past + t) * KV;
  for (int64_t i = threadIdx.x; i < KV; i += blockDim.x) {
    k_cache[at + i] = k[i];
    v_cache[at + i] = k[KV + i];
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarps* kWarpSize)
    attention_kv_kernel(T* __restrict__ out, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                        const T* __restrict__ qkv, int64_t Tq, int64_t past, int64_t capacity, int64_t NH,
                        int64_t NKV, int64_t HS, float scale) {
  __shared__ float warp_max_of[kWarps], warp_sum_of[kWarps];
  __shared__ float warp_acc[kWarps][kMaxKvHeadSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t t = blockIdx.x % Tq, h = (blockIdx.x / Tq) % NH, b = blockIdx.x / (Tq * NH);
  const int64_t g = h / (NH / NKV), KV = NKV * HS, W = (NH + 2 * NKV) * HS;
  const T* q_row = qkv + (b * Tq + t) * W + h * HS;

  float q[kPerLane], acc[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int64_t i = lane + r * kWarpSize;
    q[r] = i < HS ? load_f32(q_row[i]) * scale : 0.0f;
    acc[r] = 0.0f;
  }
  float running_max = -INFINITY, running_sum = 0.0f;
  const int64_t visible = past + t + 1;
  for (int64_t j = warp; j < visible; j += kWarps) {
    const T* k = k_cache + (b * capacity + j) * KV + g * HS;
    const T* v = v_cache + (b * capacity + j) * KV + g * HS;
    float dot = 0.0f;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int64_t i = lane + r * kWarpSize;
      if (i < HS) dot += q[r] * load_f32(k[i]);
    }
    const float score = warp_sum(dot);
    const float new_max = fmaxf(running_max, score);
    const float rescale = __expf(running_max - new_max), weight = __expf(score - new_max);
    running_sum = running_sum * rescale + weight;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int64_t i = lane + r * kWarpSize;
      acc[r] = acc[r] * rescale + (i < HS ? weight * load_f32(v[i]) : 0.0f);
    }
    running_max = new_max;
  }

  // Merge: a warp that saw no key has max -inf and sum 0 and weighs nothing.
  if (lane == 0) {
    warp_max_of[warp] = running_max;
    warp_sum_of[warp] = running_sum;
  }
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int64_t i = lane + r * kWarpSize;
    if (i < HS) warp_acc[warp][i] = acc[r];
  }
  __syncthreads();
  float block_max_value = -INFINITY;
  for (int w = 0; w < kWarps; ++w) block_max_value = fmaxf(block_max_value, warp_max_of[w]);
  float total = 0.0f;
  float weight_of[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    weight_of[w] = warp_sum_of[w] > 0.0f ? __expf(warp_max_of[w] - block_max_value) : 0.0f;
    total += warp_sum_of[w] * weight_of[w];
  }
  T* o = out + (b * Tq + t) * NH * HS + h * HS;
  for (int64_t i = threadIdx.x; i < HS; i += blockDim.x) {
    float value = 0.0f;
    for (int w = 0; w < kWarps; ++w) value += warp_acc[w][i] * weight_of[w];
    o[i] = store_as<T>(value / total);
  }
}

}  // namespace

// --- launchers ---

template <typename T>
void attention_kv_forward(T* out, T* k_cache, T* v_cache, const T* qkv, int64_t B, int64_t Tq, int64_t past,
                          int64_t capacity, int64_t NH, int64_t NKV, int64_t HS, cudaStream_t stream) {
  TS_CHECK(HS >= 1 && HS <= kMaxKvHeadSize, "attention_kv_forward on the GPU: head size ", HS, " is above ",
           kMaxKvHeadSize, "; generate on the CPU (--device cpu)");
  if (B * Tq == 0) return;
  append_kv_kernel<T><<<B * Tq, 128, 0, stream>>>(k_cache, v_cache, qkv, Tq, past, capacity, NH, NKV * HS, HS);
  CUDA_CHECK_LAUNCH();
  const float scale = 1.0f / sqrtf(float(HS));
  attention_kv_kernel<T><<<B * NH * Tq, kWarps * kWarpSize, 0, stream>>>(out, k_cache, v_cache, qkv, Tq, past,
                                                                          capacity, NH, NKV, HS, scale);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                              \
  template void attention_kv_forward<T>(T*, T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                        int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::cuda
