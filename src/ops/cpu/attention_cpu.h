// CPU kernels of causal multi-head and grouped-query self-attention, flash style (contract in
// ops/attention.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// C = NH*HS is the width of q (and of out); qkv rows hold (NH + 2*NKV) * HS floats; NKV divides NH.
// doc_starts: null, or (B,T), each token's document start (document masking, ops/attention.h); softcap > 0
// caps the scores (ops/attention.h), 0 does not.
// out (B,T,C), lse (B,NH,T) from qkv (B,T,(NH+2NKV)*HS).
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV, const int32_t* doc_starts, float softcap);
// dqkv (B,T,(NH+2NKV)*HS) written, from dout (B,T,C), qkv, out (B,T,C), lse (B,NH,T).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, const int32_t* doc_starts,
                        float softcap);

}  // namespace tessera::cpu
