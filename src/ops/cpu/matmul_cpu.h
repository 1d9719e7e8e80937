// CPU kernels of the linear layer Y = X W^T + b through OpenBLAS (contract in ops/matmul.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (N,OC) = x (N,C) weight^T + bias; weight (OC,C), bias (OC) or null.
void matmul_forward(float* out, const float* x, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC);
// dx (N,C) written (skipped when null); dweight (OC,C) +=; dbias (OC) += (skipped when null).
void matmul_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                     const float* weight, int64_t N, int64_t C, int64_t OC);

}  // namespace tessera::cpu
