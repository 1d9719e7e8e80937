// CUDA launchers of LayerNorm over the last dimension, eps = 1e-5 (contract in ops/layernorm.h).
// Raw device pointers; activations, weight and bias fp32 or bf16 (arithmetic fp32), statistics and
// parameter gradients fp32; queued on `stream`; each checks its launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (N,C), mean (N), rstd (N) from x (N,C), weight (C), bias (C).
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight, const float* bias,
                       int64_t N, int64_t C, cudaStream_t stream);
void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* x,
                       const __nv_bfloat16* weight, const __nv_bfloat16* bias, int64_t N, int64_t C,
                       cudaStream_t stream);
// residual_out (N,C) = a (N,C) + b (N,C), then out, mean, rstd = LayerNorm(residual_out) as above,
// in one kernel.
void residual_layernorm_forward(float* residual_out, float* out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int64_t N, int64_t C,
                                cudaStream_t stream);
void residual_layernorm_forward(__nv_bfloat16* residual_out, __nv_bfloat16* out, float* mean, float* rstd,
                                const __nv_bfloat16* a, const __nv_bfloat16* b, const __nv_bfloat16* weight,
                                const __nv_bfloat16* bias, int64_t N, int64_t C, cudaStream_t stream);
// dx (N,C) written; dweight (C), dbias (C) accumulated, summed over rows in a fixed order.
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        cudaStream_t stream);
void layernorm_backward(__nv_bfloat16* dx, float* dweight, float* dbias, const __nv_bfloat16* dout,
                        const __nv_bfloat16* x, const __nv_bfloat16* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, cudaStream_t stream);

}  // namespace tessera::cuda
