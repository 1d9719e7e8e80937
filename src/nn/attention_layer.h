// The attention half of a block: qkv projection (or DeepSeek's latent attention's projections,
// nn/latent_attention.h), RMSNorm of the queries and keys (config.qk_norm: Qwen3's per head, OLMo 2's
// over all of a token's heads), rotary embeddings (when the config uses RoPE), causal multi-head or
// grouped-query attention, output projection.
//   forward:  out = o_proj(attention(rope(qk_norm(qkv_proj(x)))))
//   backward: dx written from dout; parameter gradients accumulate.
// The saved qkv is the rotated one, which is what attention's backward reads.
#pragma once

#include "core/tensor.h"
#include "nn/context_parallel.h"
#include "nn/decoder_layout.h"
#include "nn/deferred_weight_grads.h"
#include "nn/fp8_scaling.h"
#include "nn/latent_attention.h"
#include "nn/tensor_parallel.h"
#include "nn/model_config.h"

namespace tessera {

// Where the tokens of a forward sit, on the device. Under RoPE: rope (T) i32, the tokens' positions (a
// cp rank's true ones), and inv_freq (HS/2) f32. Under document masking: doc_starts (B,T) i32, each
// token's first visible key (its document's start, a true position; ops/attention.h), and with learned
// positions and documents
// in_document (B,T) i32, each token's position within its document (the embedding's row). Each
// undefined when unused.
struct SequencePositions {
  Tensor rope, inv_freq, doc_starts, in_document;
  bool rotate = true;  // false: the block takes no RoPE (ModelConfig::nope_layers)
  // A windowed model's: window_starts (B,T) i32, each token's first visible key under the window (and its
  // document); local_inv_freq the sliding blocks' own RoPE frequencies (Gemma's local base), or undefined.
  Tensor window_starts, local_inv_freq;
  int64_t window = 0;  // generation's: the block's sliding window over the key/value cache, 0 = none
};

// `seq` as block `layer` reads it: not rotating in a block without RoPE; a sliding block's first
// visible keys and local frequencies in place of doc_starts and inv_freq.
SequencePositions block_positions(const SequencePositions& seq, const ModelConfig& config, int64_t layer);

// positions (count) i32 on `device`: first, first + 1, ..., the absolute positions of a run of tokens.
Tensor rope_positions(int64_t first, int64_t count, Device device);

struct AttentionActivations {
  Tensor qkv;   // (B,T,(NH+2NKV)*HS), after RoPE
  Tensor core;  // (B,T,C): attention's output, before o_proj
  Tensor lse;   // (B,NH,T) f32
  Tensor out;   // (B,T,C)
  // With config.qk_norm: the queries and keys before their norms, a row per head ((B·T·NH, HS) and
  // (B·T·NKV, HS)) or under qk_norm_all_heads per token ((B·T, NH·HS) and (B·T, NKV·HS)), and the
  // norms' rstd, f32, one per row.
  Tensor q_in, k_in, q_rstd, k_rstd;
  LatentActivations latent;  // with config.mla
  // Without `with_core`, core and lse (and latent values) are left for the caller (selective
  // recomputation shares them).
  // out holds T_out positions (T / tp under sequence parallelism), the rest all T.
  void allocate(const ModelConfig& config, int64_t B, int64_t T, int64_t T_out, DType dtype, Device device,
                bool with_core = true);
};

// Scratch shared by every block's backward: dcore (B,T,C) and dqkv (B,T,qkv width).
struct AttentionScratch {
  Tensor dcore, dqkv;
};

// With `tp`, a tensor-parallel rank's heads: the output reduced over the group, the input gradient too.
// With `cp`, x holds the rank's positions of every sequence (nn/context_parallel.h) and attention runs
// over the whole sequences held by the group (`seq` holds the true positions).
void attention_layer_forward(const ModelConfig& config, AttentionActivations& a, const Tensor& x,
                             const BlockWeights& w, const SequencePositions& seq, TensorParallel* tp = nullptr,
                             ContextParallel* cp = nullptr, Fp8Block fp8 = {});
// Generation: the same layer for new tokens at positions past.., their keys and values appended to
// the caches (B, capacity, NKV*HS) and attention taken over the cache (ops/attention_kv.h).
void attention_layer_decode(const ModelConfig& config, AttentionActivations& a, const Tensor& x,
                            const BlockWeights& w, const SequencePositions& seq, Tensor& k_cache, Tensor& v_cache,
                            int64_t past);
// Selective recomputation: core and lse (and latent values) again from the saved (rotated) qkv.
void attention_core_recompute(const ModelConfig& config, AttentionActivations& a, const SequencePositions& seq,
                              ContextParallel* cp = nullptr);
void attention_layer_backward(const ModelConfig& config, Tensor& dx, BlockWeights& g, const Tensor& dout,
                              const AttentionActivations& a, const Tensor& x, const BlockWeights& w,
                              const SequencePositions& seq, AttentionScratch& scratch, DeferredWeightGrads* deferred = nullptr,
                              TensorParallel* tp = nullptr, ContextParallel* cp = nullptr, Fp8Block fp8 = {});

}  // namespace tessera
