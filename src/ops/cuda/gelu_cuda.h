// CUDA launchers of GELU, tanh approximation (contract in ops/gelu.h).
// Raw device pointers, fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (n) = gelu(x (n)).
void gelu_forward(float* out, const float* x, int64_t n, cudaStream_t stream);
// dx (n) = dout (n) * gelu'(x (n)), written.
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda
