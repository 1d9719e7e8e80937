// CUDA launchers of the residual connection (contract in ops/residual.h).
// Raw device pointers, storage fp32 or bf16 (arithmetic fp32), queued on `stream`; each checks its
// launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (n) = a (n) + b (n).
void residual_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
void residual_forward(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                      cudaStream_t stream);
// acc (n) += x (n).
void add_inplace(float* acc, const float* x, int64_t n, cudaStream_t stream);
void add_inplace(__nv_bfloat16* acc, const __nv_bfloat16* x, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda
