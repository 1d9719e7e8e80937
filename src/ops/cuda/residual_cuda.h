// CUDA launchers of the residual connection (contract in ops/residual.h).
// Raw device pointers, storage T = float, __nv_bfloat16 or __half (arithmetic fp32), queued on
// `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (n) = a (n) + b (n).
template <typename T> void residual_forward(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream);
// acc (n) += x (n).
template <typename T> void add_inplace(T* acc, const T* x, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda
