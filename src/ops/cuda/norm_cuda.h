// CUDA launchers of the gradient-clipping reductions (contract in ops/norm.h).
// Raw device pointers, fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// sum_i x[i]^2 over n elements in fp64, returned to the host (synchronises the stream). A fixed
// grid and a fixed summation order: the result depends on x only, bit for bit.
double squared_norm(const float* x, int64_t n, cudaStream_t stream);
// x (n) *= factor.
template <typename T>
void scale_inplace(T* x, int64_t n, float factor, cudaStream_t stream);

}  // namespace tessera::cuda
