// CUDA launchers of LayerNorm over the last dimension, eps = 1e-5 (contract in ops/layernorm.h).
// Raw device pointers; activations, weight and bias of storage T = float, __nv_bfloat16 or __half
// (arithmetic fp32), statistics and parameter gradients fp32; queued on `stream`; each checks its
// launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (N,C), mean (N), rstd (N) from x (N,C), weight (C), bias (C).
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* weight, const T* bias, int64_t N,
                       int64_t C, cudaStream_t stream);
// residual_out (N,C) = a (N,C) + b (N,C), then out, mean, rstd = LayerNorm(residual_out) as above,
// in one kernel.
template <typename T>
void residual_layernorm_forward(T* residual_out, T* out, float* mean, float* rstd, const T* a, const T* b,
                                const T* weight, const T* bias, int64_t N, int64_t C, cudaStream_t stream);
// dx (N,C) written, or added to when add_to_dx (in fp32, rounded once); dweight (C), dbias (C)
// accumulated, summed over rows in a fixed order.
template <typename T>
void layernorm_backward(T* dx, float* dweight, float* dbias, const T* dout, const T* x, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, bool add_to_dx,
                        cudaStream_t stream);

}  // namespace tessera::cuda
