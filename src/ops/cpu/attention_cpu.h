// CPU kernels of causal multi-head self-attention, flash style (contract in ops/attention.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (B,T,C), lse (B,NH,T) from qkv (B,T,3C); HS = C/NH.
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
// dqkv (B,T,3C) written, from dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t C, int64_t NH);

}  // namespace tessera::cpu
