// Causal attention of new tokens over a key/value cache (generation without re-running the prefix).
//   qkv (B, Tq, (NH + 2*NKV) * HS): the new tokens' packed q | k | v (after RoPE), at absolute
//   positions past .. past+Tq-1. Their k and v are first written into the cache rows
//   [past, past+Tq) of k_cache and v_cache (B, capacity, NKV*HS); then
//   out (B, Tq, NH*HS) = softmax(q k^T / sqrt(HS) + causal mask) v over cache rows [0, past+Tq),
//   query t seeing keys 0 .. past+t (with a sliding `window` W > 0, only the W latest: past+t-W+1 ..
//   past+t), query head h using kv head h / (NH / NKV); softcap > 0 caps the scores (ops/attention.h,
//   CPU only).
// The same values as attention_forward over the whole sequence, up to summation order. f32 on the CPU;
// f32, bf16 or f16 on the GPU (arithmetic fp32), every tensor in qkv's dtype.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera {

void attention_kv_forward(Tensor& out, Tensor& k_cache, Tensor& v_cache, const Tensor& qkv, int64_t past,
                          int num_heads, int num_kv_heads, int64_t window = 0, float softcap = 0.0f);

}  // namespace tessera
