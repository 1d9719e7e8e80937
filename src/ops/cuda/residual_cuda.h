// CUDA launchers of the residual connection (contract in ops/residual.h).
// Raw device pointers, fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (n) = a (n) + b (n).
void residual_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
// acc (n) += x (n).
void add_inplace(float* acc, const float* x, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda
