// Causal attention of one query block over one key/value block, with the tokens' true positions: the
// step of ring attention (parallel/cp), which visits every kv block of the sequence once per query block.
//   qkv (B, Tq, (NH + 2*NKV) * HS): the query block's tokens packed as in ops/attention.h; only q is read.
//   kv  (B, Tk, 2*NKV*HS): the kv block's tokens, [k (NKV heads) | v (NKV heads)] (attention_block_kv).
//   positions: host i32, q (Tq) and kv (Tk), each strictly increasing; query p sees key s iff s <= p.
// forward: the block's softmax(q k^T / sqrt(HS) + mask) v merged into the running out (B,Tq,NH*HS) and
//   lse (B,NH,Tq): lse' = log(e^lse + e^lse_blk), out' = e^(lse-lse') out + e^(lse_blk-lse') out_blk.
//   first = true initialises them (a row that sees no key yet: out 0, lse -inf); a row that sees no key
//   of the block keeps its values. After every block of the sequence they equal attention_forward's.
// backward: from the FINAL lse and D = attention_block_delta(dout, final out), the pair's gradients
//   accumulate (+=): dq into the q channels of dqkv (its k and v channels untouched), dk and dv into dkv.
// doc_starts (B,Tq) i32 on qkv's device, or undefined: the true position of each query's document start
// (packed sequences, ops/attention.h); query p at row (b, i) then sees key s iff doc_starts[b,i] <= s <= p,
// so a row may see no key of a block. Non-decreasing along each row's positions, each <= its position.
// softcap > 0 caps the scores before the mask (Gemma 2's, as in ops/attention.h; CPU only).
// f32 on the CPU. On the GPU qkv, out, dout and dqkv may also be bf16 or f16 (fp32 arithmetic); kv, dkv,
// lse and delta are f32 on both devices (kv crosses the ring and dkv sums over it unrounded).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace tessera {

struct BlockPositions {
  std::span<const int32_t> q, kv;  // (Tq), (Tk): true positions in the sequence, strictly increasing
};

// num_kv_heads = 0 means num_heads (multi-head attention), as in ops/attention.h.
void attention_block_forward(Tensor& out, Tensor& lse, const Tensor& qkv, const Tensor& kv,
                             BlockPositions positions, int num_heads, int num_kv_heads, bool first,
                             const Tensor& doc_starts = {}, float softcap = 0.0f);
// delta (B,NH,Tq) written: D = sum over each head's HS channels of dout * out (B,Tq,NH*HS).
void attention_block_delta(Tensor& delta, const Tensor& dout, const Tensor& out, int num_heads);
void attention_block_backward(Tensor& dqkv, Tensor& dkv, const Tensor& dout, const Tensor& qkv, const Tensor& kv,
                              const Tensor& lse, const Tensor& delta, BlockPositions positions, int num_heads,
                              int num_kv_heads, const Tensor& doc_starts = {}, float softcap = 0.0f);

// kv (B,T,2*NKV*HS): a copy of the k and v channels of qkv (B,T,(NH+2NKV)*HS).
Tensor attention_block_kv(const Tensor& qkv, int num_heads, int num_kv_heads);
// Writes (=) dkv (B,T,2*NKV*HS) into the k and v channels of dqkv (B,T,(NH+2NKV)*HS); q untouched.
void attention_block_kv_to_qkv(Tensor& dqkv, const Tensor& dkv, int num_heads, int num_kv_heads);

}  // namespace tessera
