// CUDA launchers of LayerNorm over the last dimension, eps = 1e-5 (contract in ops/layernorm.h).
// Raw device pointers, fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (N,C), mean (N), rstd (N) from x (N,C), weight (C), bias (C).
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight, const float* bias,
                       int64_t N, int64_t C, cudaStream_t stream);
// dx (N,C) written; dweight (C), dbias (C) accumulated, summed over rows in a fixed order.
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        cudaStream_t stream);

}  // namespace tessera::cuda
