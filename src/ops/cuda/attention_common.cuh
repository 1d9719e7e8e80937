// Pieces both causal-attention implementations share (attention.cu on CUDA cores, attention_tc.cu on
// tensor cores): where a head's q, k and v columns sit in the packed qkv, the backward's row term
// delta = rowsum(dout * out) and the launch of a kernel that needs more than 48 KB of dynamic shared
// memory. Included by .cu files only.
#pragma once

#include <cstdint>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {

// The packed qkv (B, T, (NH + 2 NKV) HS): NH query heads, then NKV key heads, then NKV value heads.
// Query head h shares kv head h / (NH / NKV) with the other query heads of its group (NKV = NH is
// multi-head attention, NKV < NH grouped-query attention).
struct QkvHeads {
  int NH, NKV, HS;
  __host__ __device__ int64_t row_stride() const { return int64_t(NH + 2 * NKV) * HS; }
  __host__ __device__ int group() const { return NH / NKV; }
  __device__ int kv_head(int h) const { return h / group(); }
  __device__ int64_t q_column(int h) const { return int64_t(h) * HS; }
  __device__ int64_t k_column(int kv) const { return int64_t(NH + kv) * HS; }
  __device__ int64_t v_column(int kv) const { return int64_t(NH + NKV + kv) * HS; }
};

// delta (B,NH,T) = sum over a head's HS channels of dout * out, both (B,T,C); one thread per (b,t,h).
// HS is a multiple of kVec<E> (the head sizes of both kernels are multiples of 16).
template <typename E>
__global__ void attention_delta_kernel(float* delta, const E* dout, const E* out, int64_t B, int T, int NH, int HS) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (b * T + t) * NH + h
  if (idx >= B * T * NH) return;
  const int64_t bt = idx / NH, b = bt / T;
  const int h = int(idx % NH), t = int(bt % T);
  const E* dout_row = dout + idx * HS;  // = (b * T + t) * C + h * HS
  const E* out_row = out + idx * HS;
  constexpr int kW = kVec<E>;
  float sum = 0.0f;
  for (int d = 0; d < HS; d += kW) {
    float x[kW], y[kW];
    load_f32_vec(x, dout_row + d);
    load_f32_vec(y, out_row + d);
#pragma unroll
    for (int k = 0; k < kW; k++) sum = fmaf(x[k], y[k], sum);
  }
  delta[(b * NH + h) * T + t] = sum;
}

// Queues attention_delta_kernel over (B,T,NH) on `stream`.
template <typename E>
void launch_attention_delta(float* delta, const E* dout, const E* out, int64_t B, int64_t T, int64_t NH, int HS,
                            cudaStream_t stream) {
  constexpr int kBlock = 256;
  attention_delta_kernel<E><<<unsigned(ceil_div(B * T * NH, kBlock)), kBlock, 0, stream>>>(delta, dout, out, B,
                                                                                           int(T), int(NH), HS);
  CUDA_CHECK_LAUNCH();
}

// Opts a kernel into `bytes` of dynamic shared memory (needed above 48 KB), then launches it with
// `threads` threads per block.
template <typename... Params, typename... Args>
void launch_with_shared(void (*kernel)(Params...), dim3 grid, int threads, size_t bytes, cudaStream_t stream,
                        Args... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<grid, threads, bytes, stream>>>(args...);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
