// Attention over a key/value cache on the GPU, for generation: few query rows (Tq is 1 per new
// token) over up to `capacity` cached positions. One block per (b, query head, query row), which
// attends over the row's visible cache rows (its sliding window's, when it has one; row_attention.cuh).
#include "core/error.h"
#include "ops/cuda/attention_kv_cuda.h"
#include "ops/cuda/row_attention.cuh"

namespace tessera::cuda {
namespace {

static_assert(kMaxKvHeadSize <= kRowMaxHeadSize);

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
__global__ void __launch_bounds__(kRowWarps* kWarpSize)
    attention_kv_kernel(T* __restrict__ out, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                        const T* __restrict__ qkv, int64_t Tq, int64_t past, int64_t capacity, int64_t NH,
                        int64_t NKV, int64_t HS, int64_t window, float scale) {
  __shared__ RowAttention row;
  const int64_t t = blockIdx.x % Tq, h = (blockIdx.x / Tq) % NH, b = blockIdx.x / (Tq * NH);
  const int64_t g = h / (NH / NKV), KV = NKV * HS, W = (NH + 2 * NKV) * HS;
  // The row's visible cache rows: all before it, or under a sliding window its `window` latest.
  const int64_t visible = past + t + 1, first = window > 0 && visible > window ? visible - window : 0;
  const int64_t first_key = (b * capacity + first) * KV + g * HS;
  attend_row(row, qkv + (b * Tq + t) * W + h * HS, k_cache + first_key, v_cache + first_key, KV, visible - first,
             HS, scale);
  T* o = out + (b * Tq + t) * NH * HS + h * HS;
  for (int64_t i = threadIdx.x; i < HS; i += blockDim.x) o[i] = store_as<T>(row.out[i]);
}

}  // namespace

// --- launchers ---

template <typename T>
void attention_kv_forward(T* out, T* k_cache, T* v_cache, const T* qkv, int64_t B, int64_t Tq, int64_t past,
                          int64_t capacity, int64_t NH, int64_t NKV, int64_t HS, int64_t window, cudaStream_t stream) {
  TS_CHECK(HS >= 1 && HS <= kMaxKvHeadSize, "attention_kv_forward on the GPU: head size ", HS, " is above ",
           kMaxKvHeadSize, "; generate on the CPU (--device cpu)");
  if (B * Tq == 0) return;
  append_kv_kernel<T><<<B * Tq, 128, 0, stream>>>(k_cache, v_cache, qkv, Tq, past, capacity, NH, NKV * HS, HS);
  CUDA_CHECK_LAUNCH();
  const float scale = 1.0f / sqrtf(float(HS));
  attention_kv_kernel<T><<<B * NH * Tq, kRowWarps * kWarpSize, 0, stream>>>(out, k_cache, v_cache, qkv, Tq, past,
                                                                          capacity, NH, NKV, HS, window, scale);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                              \
  template void attention_kv_forward<T>(T*, T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                        int64_t, int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::cuda
