// Device helpers shared by the kernels in this folder: warp and block reductions (fp32 and fp64),
// fp32 <-> storage-type conversions for kernels templated on float / __nv_bfloat16 / __half, the
// explicit instantiation of launchers for those three, and the launch-size arithmetic. Included by
// .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"

namespace tessera::cuda {

constexpr int kWarpSize = 32;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Opts a kernel into `bytes` of dynamic shared memory (needed above 48 KB), then launches it with
// `threads` threads per block.
template <typename... Params, typename... Args>
void launch_with_shared(void (*kernel)(Params...), dim3 grid, int threads, size_t bytes, cudaStream_t stream,
                        Args... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<grid, threads, bytes, stream>>>(args...);
  CUDA_CHECK_LAUNCH();
}

// The shared memory one block may opt into on the current device (227 KB on an H100).
inline size_t shared_memory_optin_bytes() {
  int device = 0, bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return size_t(bytes);
}

// Storage types hold activations and weights; arithmetic is fp32. load_f32 widens, store_as rounds
// to nearest even.
__device__ __forceinline__ float load_f32(float v) { return v; }
__device__ __forceinline__ float load_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load_f32(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T store_as(float v);
template <> __device__ __forceinline__ float store_as<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 store_as<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half store_as<__half>(float v) { return __float2half_rn(v); }

// INSTANTIATE(T) for every storage type: a .cu file defines its launcher templates, then
// instantiates them with a local INSTANTIATE macro passed here.
#define TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE) INSTANTIATE(float) INSTANTIATE(__nv_bfloat16) INSTANTIATE(__half)

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` holds 32 values; the call starts and ends with a barrier, so it can be reused.
template <typename T>
__device__ inline T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(0);
  return warp_sum(v);
}

// Maximum over the whole block; same rules as block_sum.
__device__ inline float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace tessera::cuda
