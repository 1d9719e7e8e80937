// CUDA launchers of GELU, tanh approximation (contract in ops/gelu.h).
// Raw device pointers, storage T = float, __nv_bfloat16 or __half (arithmetic fp32), queued on
// `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (n) = gelu(x (n)).
template <typename T> void gelu_forward(T* out, const T* x, int64_t n, cudaStream_t stream);
// dx (n) = dout (n) * gelu'(x (n)), written.
template <typename T> void gelu_backward(T* dx, const T* dout, const T* x, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda
