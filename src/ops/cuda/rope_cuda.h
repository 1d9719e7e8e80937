// CUDA launchers of rotary position embeddings (contract in ops/rope.h).
// Raw device pointers; qkv of storage S = float, __nv_bfloat16 or __half (arithmetic fp32),
// positions i32, inv_freq fp32; queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// qkv (B, T, (NH + 2*NKV) * HS): the last R channels (R even, <= HS) of the NH q heads and NKV k heads
// of every token rotated in place by positions[t] (T) * inv_freq (R/2), times `rotated`, and the q heads
// times `query` (ops/rope.h's RopeScales); v untouched.
template <typename S>
void rope_forward(S* qkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                  int64_t NKV, int64_t HS, int64_t R, float rotated, float query, cudaStream_t stream);
// The transpose: the same channels of the dq and dk heads of dqkv (B, T, (NH + 2*NKV) * HS) rotated in place by -angle.
template <typename S>
void rope_backward(S* dqkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                   int64_t NKV, int64_t HS, int64_t R, float rotated, float query, cudaStream_t stream);

}  // namespace tessera::cuda
