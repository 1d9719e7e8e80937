// The decoder's activation bytes, each term beside the allocation it mirrors.
#include "nn/activation_memory.h"

#include <algorithm>

namespace tessera {
namespace {

constexpr int64_t kF32 = 4, kI32 = 4;

// The bytes of one block's buffers in the three groups recomputation treats apart.
struct BlockBytes {
  int64_t dropped = 0;  // selective recomputation's shared set: attention core, its lse, the activation's output
  int64_t kept = 0;     // every other buffer but the output
  int64_t out = 0;      // the block's output (the next block's input), kept by full recomputation
  int64_t all() const { return dropped + kept + out; }
};

// NormActivations::allocate: out (B,T,C), rstd (B,T) f32 and, for LayerNorm, mean (B,T) f32.
int64_t norm_bytes(const ModelConfig& c, int64_t B, int64_t T, int64_t s) {
  return B * T * c.channels * s + (c.norm == NormKind::layernorm ? 2 : 1) * B * T * kF32;
}

// BlockActivations::allocate with AttentionActivations, MlpActivations and MoeActivations::allocate.
BlockBytes block_bytes(const ModelConfig& c, int64_t layer, const ActivationShape& a) {
  const int64_t B = a.B, T = a.T, Tl = a.T_local, C = c.channels, s = dtype_size(a.dtype);
  BlockBytes b;
  const int64_t pre_norms = c.shared_norm ? 1 : 2;  // Cohere's blocks: norm1 alone
  const int64_t norms = (has_pre_norms(c.norm_placement) ? pre_norms : 0) + (has_post_norms(c.norm_placement) ? 2 : 0);
  b.kept += norms * norm_bytes(c, B, Tl, s) + 2 * B * Tl * C * s;  // norm1, norm2 and their post twins; mid, attn.out
  b.kept += B * T * c.qkv_width() * s;                              // attn.qkv
  if (c.qk_norm)  // attn.q_in, k_in and their rstd (a row each head, or each token under qk_norm_all_heads)
    b.kept += B * T * ((c.num_heads + c.kv_heads()) * c.head_size() * s +
                       (c.qk_norm_all_heads ? 2 : c.num_heads + c.kv_heads()) * kF32);
  b.dropped += B * T * c.attention_width() * s + B * c.num_heads * T * kF32;  // attn.core, attn.lse
  if (c.mla.enabled()) {  // attn.latent: the latents before and after their norms with the rstd; values
    b.kept += B * T * (2 * (c.mla.q_rank + c.mla.kv_rank) * s + (c.mla.q_rank > 0 ? 2 : 1) * kF32);
    b.dropped += B * T * c.value_width() * s;
  }
  if (c.is_moe_block(layer)) {
    const int64_t N = B * T, E = c.moe.num_experts, K = c.moe.top_k, Fe = c.moe.expert_hidden;
    const int64_t Fs = c.moe.num_shared_experts * Fe;
    const int64_t R = a.expert_rows, rows = std::max(N * K, R);  // the experts' rows; h and act grow to them
    b.kept += N * E * s + N * E * kF32 + N * kF32;        // logits, scores, lse
    b.kept += N * K * kI32 + N * K * kF32 + N * K * kI32;  // experts, weights, order
    if (c.moe.routed_scale != 1.0f) b.kept += N * K * kF32;  // scaled_weights
    b.kept += (E + 1) * kI32;                              // offsets (on the host)
    b.kept += 2 * N * K * C * s + rows * 2 * Fe * s;       // xs, ys, h
    if (R > 0) b.kept += 2 * R * C * s + (E + 1) * kI32;   // expert parallelism: expert_xs, expert_ys, expert_offsets
    b.dropped += rows * Fe * s;                            // act
    if (Fs > 0) b.kept += B * T * 2 * Fs * s + B * T * Fs * s + B * T * C * s;  // shared: h, act, out
    if (c.moe.shared_gate) b.kept += N * s;                // their gate's logits
    b.kept += B * Tl * C * s;                              // out
  } else {
    const int64_t F = c.hidden();
    b.kept += B * T * (is_gated(c.mlp) ? 2 * F : F) * s + B * Tl * C * s;  // mlp.h, mlp.out
    b.dropped += B * T * F * s;                                                       // mlp.act
  }
  b.out = B * Tl * C * s;
  return b;
}

// DecoderActivations::allocate_blocks: recomputed blocks share one set of buffers per block kind
// (dense, MoE): a whole block's but the output under full recomputation (each block keeps its own
// output, and the set's is freed), the dropped tensors under selective.
int64_t blocks_bytes(const ModelConfig& c, const ActivationShape& a) {
  int64_t bytes = 0;
  bool dense_shared = false, moe_shared = false;
  for (int64_t l = a.blocks.first; l < a.blocks.end; ++l) {
    const BlockBytes b = block_bytes(c, l, a);
    if (!a.recompute.covers(l)) {
      bytes += b.all();
      continue;
    }
    const bool full = a.recompute.mode == Recompute::full;
    bool& shared = c.is_moe_block(l) ? moe_shared : dense_shared;
    if (!shared) bytes += full ? b.dropped + b.kept : b.dropped;
    shared = true;
    bytes += full ? b.out : b.kept + b.out;
  }
  return bytes;
}

// MoeScratch::allocate.
int64_t moe_scratch_bytes(const ModelConfig& c, const ActivationShape& a) {
  const int64_t B = a.B, T = a.T, N = B * T, C = c.channels, s = dtype_size(a.dtype);
  const int64_t E = c.moe.num_experts, K = c.moe.top_k, Fe = c.moe.expert_hidden, Fs = c.moe.num_shared_experts * Fe;
  const int64_t R = a.expert_rows, rows = std::max(N * K, R);
  return 2 * N * K * C * s + rows * Fe * s + rows * 2 * Fe * s  // dys, dxs, dact, dh
         + N * K * kF32 + N * E * s + B * T * C * s              // dweights, dlogits, dpart
         + (Fs > 0 ? B * T * 3 * Fs * s : 0)                     // shared: dh, dact
         + (c.moe.shared_gate ? B * T * C * s + N * s : 0)       // gated shared: dshared, dgate
         + 3 * R * C * s;  // expert parallelism: expert_dys, expert_dxs, and a row exchange's buffer in flight
}

// latent_qkv_backward's and attention_layer_backward's temporaries at their peak, over N tokens: the
// values' gradient, then dq, d[k_nope | v], dk_rope twice and the latents' gradients (d[c | k_rope], dc
// after and before its norm, the query latent's two), and the q path's input gradient.
int64_t latent_scratch_bytes(const ModelConfig& c, int64_t N, int64_t s) {
  const LatentAttentionConfig& m = c.mla;
  return N * s * (c.value_width() + c.attention_width() + c.num_heads * (m.nope_dim + m.v_dim) + 3 * m.rope_dim +
                  3 * m.kv_rank + 2 * m.q_rank + c.channels);
}

}  // namespace

ActivationBytes decoder_activation_bytes(const ModelConfig& c, const ActivationShape& a) {
  const int64_t B = a.B, T = a.T, Tl = a.T_local, C = c.channels, F = c.hidden(), s = dtype_size(a.dtype);
  ActivationBytes bytes;
  // DecoderActivations::ensure
  bytes.saved += B * Tl * C * s + blocks_bytes(c, a);  // embedded, blocks
  if (a.blocks.end == c.num_layers) bytes.saved += norm_bytes(c, B, Tl, s) + B * T * kF32;  // final_norm, losses
  if (c.positions == PositionKind::rope) bytes.saved += T * kI32 + c.rotary_dim() / 2 * kF32;  // rotary
  if (a.blocks.first == 0) bytes.saved += B * T * kI32;  // tokens (Decoder::embed's copy)
  const bool swiglu = is_gated(c.mlp);
  bytes.scratch += (B * Tl * C + std::max(B * Tl * C, B * T * c.attention_width())) * s;  // dresidual, dnormed/dcore
  bytes.scratch += B * T * std::max(c.qkv_width(), swiglu ? 2 * F : F) * s;  // dqkv and mlp.dh share it
  if (swiglu) bytes.scratch += B * T * F * s;                                  // mlp.dact
  if (has_post_norms(c.norm_placement) || c.parallel_residual) bytes.scratch += B * Tl * C * s;  // dbranch
  if (c.qk_norm) bytes.scratch += B * T * c.num_heads * c.head_size() * s;     // the query norm's input gradient
  if (c.mla.enabled()) bytes.scratch += latent_scratch_bytes(c, B * T, s);
  if (c.moe.enabled()) bytes.scratch += moe_scratch_bytes(c, a);
  return bytes;
}

int64_t classifier_chunk_rows(int64_t rows, int64_t vocab_rows, DType dtype) {
  const int64_t budget = int64_t(1) << 30;  // bytes of logits at a time
  const int64_t most = std::clamp<int64_t>(budget / (vocab_rows * int64_t(dtype_size(dtype))), 1, rows);
  // As few chunks as the budget allows, all of one size (rounded up to 64 rows where that stays within
  // it): GPT-2 124M at B=16 takes two chunks of 8,192 rows, not 10,672 and a short 5,712 whose GEMMs
  // and cross-entropy run at other shapes.
  const int64_t chunks = (rows + most - 1) / most;
  const int64_t even = (rows + chunks - 1) / chunks;
  constexpr int64_t kRowMultiple = 64;
  return std::min(most, (even + kRowMultiple - 1) / kRowMultiple * kRowMultiple);
}

int64_t classifier_logits_bytes(int64_t rows, int64_t vocab_rows, DType dtype) {
  return classifier_chunk_rows(rows, vocab_rows, dtype) * vocab_rows * int64_t(dtype_size(dtype));
}

}  // namespace tessera
