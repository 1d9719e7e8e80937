// CUDA launchers of causal self-attention, flash style (contract in ops/attention.h).
// Raw device pointers, 16-byte aligned, queued on `stream`; each checks its launches. Storage fp32
// or bf16 for qkv, out, dout and dqkv alike (arithmetic fp32); lse is fp32 in both. Head sizes
// HS = C/NH in {16, 32, 48, 64, 80, 96, 128}: any other, or a misaligned pointer, throws
// tessera::Error before anything is queued. No (T,T) matrix is stored; the backward is
// deterministic (no atomics).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (B,T,C) and lse (B,NH,T), the natural-log row log-sum-exp of the scaled scores, from qkv (B,T,3C).
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       cudaStream_t stream);
void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream);
// dqkv (B,T,3C) written, from dout (B,T,C), qkv (B,T,3C), out (B,T,C) and lse (B,NH,T). Uses a
// (B,NH,T) fp32 scratch from the device allocator, so `stream` must be the compute stream.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t C, int64_t NH, cudaStream_t stream);
void attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                        const __nv_bfloat16* out, const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                        cudaStream_t stream);

}  // namespace tessera::cuda
