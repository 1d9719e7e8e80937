// DeepSeek-V2/V3's multi-head latent attention (config.mla): the parts of the attention layer that differ
// from ordinary multi-head attention, before and after its core.
//   q            = q_proj(x), or q_b(rmsnorm(q_a(x))) with a query latent
//   [c | k_rope] = kv_a(x), c the kv latent (kv_rank), k_rope one head's rope_dim channels
//   [k_nope | v] = kv_b(rmsnorm(c)), per head
//   heads        q = [q_nope | q_rope], k = [k_nope | k_rope] (the one k_rope in every head), v
// Tessera runs the core as ordinary multi-head attention on a packed qkv whose heads have nope_dim +
// rope_dim channels, each value head padded with zeros to that width: RoPE rotates the heads' tails
// (ops/rope.h), and every attention kernel, ring and all-to-all context parallelism, recomputation and
// the generation cache serve it unchanged. The core's output then holds zeros past each head's v_dim
// channels, dropped before o_proj (the heads' values).
// Under tensor parallelism the config is a rank's (its heads); the latents are whole on every rank, their
// gradients from the rank's heads (summed over the group by the decoder).
#pragma once

#include "core/tensor.h"
#include "nn/decoder_layout.h"
#include "nn/deferred_weight_grads.h"
#include "nn/model_config.h"

namespace tessera {

// What the backward reads, rows of B·T tokens: the query latent before its norm (q_rank) with its rstd
// and after it (q_b's input), undefined without a query latent; the kv latent c before its norm (kv_rank)
// with its rstd and after it (kv_b's input); the heads' values (B,T,NH·v_dim), o_proj's input.
struct LatentActivations {
  Tensor q_in, q_rstd, q_normed, kv_in, kv_rstd, kv_normed, values;
  // Without `with_values`, values are left for the caller (selective recomputation shares them).
  void allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device, bool with_values = true);
};

// qkv (B,T,3·NH·HS) written from x (B,T,C), before RoPE; the value heads' padding zero.
void latent_qkv_forward(const ModelConfig& config, Tensor& qkv, LatentActivations& a, const Tensor& x,
                        const BlockWeights& w);
// dx (B,T,C) written from dqkv (after RoPE's backward); the weights' gradients accumulate.
void latent_qkv_backward(const ModelConfig& config, Tensor& dx, BlockWeights& g, const Tensor& dqkv,
                         const LatentActivations& a, const Tensor& x, const BlockWeights& w,
                         DeferredWeightGrads* deferred);
// values (B,T,NH·v_dim): the first v_dim channels of each head of core (B,T,NH·HS).
void latent_values_forward(const ModelConfig& config, Tensor& values, const Tensor& core);
// dcore (B,T,NH·HS) written: dvalues in each head's first v_dim channels, zeros past them.
void latent_values_backward(const ModelConfig& config, Tensor& dcore, const Tensor& dvalues);

}  // namespace tessera
