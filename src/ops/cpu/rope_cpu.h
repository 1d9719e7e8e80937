// CPU kernels of rotary position embeddings (contract in ops/rope.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// qkv (B, T, (NH + 2*NKV) * HS): the last R channels (R even, <= HS) of the NH q heads and NKV k heads
// of every token rotated in place by positions[t] * inv_freq (R/2); v untouched. positions (T) are
// non-negative. The rotated channels are then multiplied by `rotated`, the q heads by `query`
// (ops/rope.h's RopeScales).
void rope_forward(float* qkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                  int64_t NKV, int64_t HS, int64_t R, float rotated, float query);
// The transpose: the same channels of the dq and dk heads of dqkv (B, T, (NH + 2*NKV) * HS) rotated in place by -angle.
void rope_backward(float* dqkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                   int64_t NKV, int64_t HS, int64_t R, float rotated, float query);

}  // namespace tessera::cpu
