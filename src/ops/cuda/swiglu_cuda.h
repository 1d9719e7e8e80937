// CUDA launchers of SwiGLU and GeGLU on a packed [gate | up] input (contract in ops/swiglu.h).
// Raw device pointers, storage T = float, __nv_bfloat16 or __half (arithmetic fp32), queued on
// `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (N,F) = act(h[:, :F]) * h[:, F:], from h (N,2F); act silu, or with `gelu` GELU's tanh form.
template <typename T>
void swiglu_forward(T* out, const T* h, int64_t N, int64_t F, bool gelu, cudaStream_t stream);
// dh (N,2F) written from dout (N,F) and h (N,2F).
template <typename T>
void swiglu_backward(T* dh, const T* dout, const T* h, int64_t N, int64_t F, bool gelu, cudaStream_t stream);

}  // namespace tessera::cuda
