// CPU kernels of LayerNorm over the last dimension (contract in ops/layernorm.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (N,C), mean (N), rstd (N) from x (N,C), weight (C), bias (C) or null (none).
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight, const float* bias,
                       int64_t N, int64_t C);
// dx (N,C) written, or added to when add_to_dx; dweight (C), dbias (C, or null: none) accumulated.
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool add_to_dx);

}  // namespace tessera::cpu
