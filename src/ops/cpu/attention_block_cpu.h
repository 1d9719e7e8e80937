// CPU kernels of the attention-block op (contract in ops/attention_block.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// qkv (B,Tq,(NH+2NKV)*HS), kv (B,Tk,2*NKV*HS), out (B,Tq,NH*HS), lse and delta (B,NH,Tq); q_pos (Tq) and
// kv_pos (Tk) strictly increasing; q_doc_starts null or (B,Tq), each query's document start (a true
// position, non-decreasing along the row's positions): the query then sees keys from there on only;
// softcap > 0 caps the scores (ops/attention.h).
struct AttentionBlock {
  int64_t B, Tq, Tk, NH, NKV, HS;
  const int32_t *q_pos, *kv_pos;
  const int32_t* q_doc_starts = nullptr;
  float softcap = 0.0f;
};

void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, const AttentionBlock& a,
                             bool first);
void attention_block_delta(float* delta, const float* dout, const float* out, int64_t B, int64_t T, int64_t NH,
                           int64_t HS);
// dq += into the q channels of dqkv (B,Tq,(NH+2NKV)*HS); dk, dv += into dkv (B,Tk,2*NKV*HS).
void attention_block_backward(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                              const float* lse, const float* delta, const AttentionBlock& a);

}  // namespace tessera::cpu
