// CPU kernel of attention_kv_forward (ops/attention_kv.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (B,Tq,NH*HS); k_cache, v_cache (B,capacity,NKV*HS) written at rows [past, past+Tq); qkv (B,Tq,(NH+2NKV)*HS);
// window 0 or the latest keys a query sees; softcap > 0 caps the scores, 0 does not.
void attention_kv_forward(float* out, float* k_cache, float* v_cache, const float* qkv, int64_t B, int64_t Tq,
                          int64_t past, int64_t capacity, int64_t NH, int64_t NKV, int64_t HS, int64_t window,
                          float softcap);

}  // namespace tessera::cpu
