// Pieces the causal-attention implementations share (attention.cu on CUDA cores, attention_tc.cu on
// tensor cores, attention_cudnn.cu through cuDNN): where a head's q, k and v columns sit in the packed
// qkv, the launch of a kernel that needs more than 48 KB of dynamic shared memory, and the 16-bit
// kernels' pointer and device requirement. Included by .cu files only.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {

// True when every pointer is 16-byte aligned and the current device has compute capability 8.0 or newer:
// what the 16-bit attention kernels (tensor-core and cuDNN) need beyond their head sizes.
inline bool aligned16_on_sm80(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (!is_aligned16(p)) return false;
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 8;
}

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

// Query head h's q rows and its kv head's k and v rows in batch b of qkv: (T, HS) each, row stride
// heads.row_stride().
template <typename E>
struct HeadRows {
  const E *q, *k, *v;
};
template <typename E>
__device__ inline HeadRows<E> head_rows(const QkvHeads& heads, const E* qkv, int b, int T, int h) {
  const E* base = qkv + int64_t(b) * T * heads.row_stride();
  const int kv = heads.kv_head(h);
  return {base + heads.q_column(h), base + heads.k_column(kv), base + heads.v_column(kv)};
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
