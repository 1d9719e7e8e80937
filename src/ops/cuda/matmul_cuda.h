// CUDA launchers of the linear layer Y = X W^T + b through cuBLASLt (contract in ops/matmul.h).
// Raw device pointers, fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (N,OC) = x (N,C) weight^T + bias; weight (OC,C), bias (OC) or null (fused as the epilogue).
void matmul_forward(float* out, const float* x, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, cudaStream_t stream);
// dx (N,C) written (skipped when null); dweight (OC,C) += (beta = 1); dbias (OC) += (skipped when
// null), a column sum over N in a fixed order.
void matmul_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                     const float* weight, int64_t N, int64_t C, int64_t OC, cudaStream_t stream);

}  // namespace tessera::cuda
