// CUDA launchers of GELU, tanh approximation (contract in ops/gelu.h).
// Raw device pointers, storage fp32 or bf16 (arithmetic fp32), queued on `stream`; each checks its
// launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (n) = gelu(x (n)).
void gelu_forward(float* out, const float* x, int64_t n, cudaStream_t stream);
void gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* x, int64_t n, cudaStream_t stream);
// dx (n) = dout (n) * gelu'(x (n)), written.
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n, cudaStream_t stream);
void gelu_backward(__nv_bfloat16* dx, const __nv_bfloat16* dout, const __nv_bfloat16* x, int64_t n,
                   cudaStream_t stream);

}  // namespace tessera::cuda
