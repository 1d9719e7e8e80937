// The decoder's parameters: their names (one family's naming, see Naming), shapes, initialisation
// and block, and typed views of a flat buffer by role. Absent parameters (no bias, no learned
// positions, a tied head, a dense block's experts) have an empty name and an undefined view.
// Linear weights are (out, in). Packed weights: qkv rows [q (NH*HS) | k (NKV*HS) | v (NKV*HS)],
// SwiGLU inputs rows [gate (F) | up (F)]; experts stacked on a leading E dimension.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/expert_parallel.h"
#include "nn/model_config.h"
#include "nn/named_tensor.h"
#include "nn/parameter_layout.h"
#include "nn/stage_partition.h"
#include "nn/tensor_parallel.h"

namespace tessera {

struct LinearNames {
  std::string weight, bias;
};

struct BlockNames {
  LinearNames norm1, qkv, attn_out, norm2;  // a norm's "weight" is its gain; norm1, norm2 empty under post-norm
  LinearNames norm1_post, norm2_post;       // the sublayers' output norms (post-norm, sandwich), or empty
  std::string q_norm, k_norm;               // Qwen3's per-head query and key gains (HS), or empty
  // Latent attention (config.mla) in place of qkv: q_proj (NH*HS, C), or q_a (q_rank, C), its norm's
  // gain q_a_norm (q_rank) and q_b (NH*HS, q_rank); kv_a (kv_rank + rope_dim, C), kv_a_norm (kv_rank) and
  // kv_b (NH*(nope_dim + v_dim), kv_rank): per head [k without RoPE | v]. attn_out is (C, NH*v_dim).
  LinearNames q_proj, q_a, q_b, kv_a, kv_b;
  std::string q_a_norm, kv_a_norm;
  LinearNames mlp_in, mlp_out;              // dense MLP: (F or 2F, C) and (C, F); empty in a MoE block
  std::string router, router_bias;          // MoE: (E, C) and the balancing bias (E) of a sigmoid router
  std::string experts_in, experts_out;      // MoE: (E, 2Fe, C) and (E, C, Fe)
  LinearNames shared_in, shared_out;        // MoE shared experts: (2Fs, C) and (C, Fs), Fs = shared * Fe
  std::string shared_gate;                  // their gate (1, C) (Qwen2-MoE), or empty
};

struct DecoderNames {
  std::string embed, positions, head;  // (Vp, C), (maxT, C) or empty, (Vp, C) or empty (tied)
  std::string head_bias;                // (Vp) (Phi-2's), or empty
  std::vector<BlockNames> blocks;
  LinearNames final_norm;
};

DecoderNames decoder_names(const ModelConfig& config);
// A pipeline stage's names: those of the parts it does not hold are empty. A stage with the head but
// not the embedding of a tied model holds a copy of the embedding under its name (Megatron's tied
// copy: initialised alike, its gradient summed with the first stage's before every update).
DecoderNames decoder_names(const ModelConfig& config, const DecoderStage& stage);
// The flat ranges of the routed experts' weights (each MoE block's experts_in and experts_out) in
// `layout`, a layout of `names`.
std::vector<OffsetRange> expert_ranges(const DecoderNames& names, const ParameterLayout& layout);
ParameterLayout decoder_layout(const ModelConfig& config);
// A pipeline stage's parameters; under tensor parallelism, tp rank's parts of them, and under expert
// parallelism only ep rank's experts (ParamSpec::slice says where each part lies in the whole).
ParameterLayout decoder_layout(const ModelConfig& config, const DecoderStage& stage, TpPlace tp = {}, EpPlace ep = {});
// Whether `stage` holds such a tied copy of the embedding.
bool holds_tied_embedding_copy(const ModelConfig& config, const DecoderStage& stage);

struct LinearWeights {
  Tensor weight, bias;  // bias undefined when the model has none
};

struct BlockWeights {
  LinearWeights norm1, qkv, attn_out, norm2, mlp_in, mlp_out;
  LinearWeights norm1_post, norm2_post;
  Tensor q_norm, k_norm;
  LinearWeights q_proj, q_a, q_b, kv_a, kv_b;  // latent attention
  Tensor q_a_norm, kv_a_norm;
  Tensor router, router_bias, experts_in, experts_out;
  LinearWeights shared_in, shared_out;
  Tensor shared_gate;
};

struct DecoderWeights {
  Tensor embed, positions, head;  // head undefined when tied: the classifier reads embed
  Tensor head_bias;               // undefined unless the model has one (ModelConfig::head_bias)
  std::vector<BlockWeights> blocks;
  LinearWeights final_norm;
  const Tensor& classifier() const { return head.defined() ? head : embed; }
};

// Views of `named` (a layout's views of some flat buffer) by role.
DecoderWeights decoder_weights(const DecoderNames& names, const NamedTensors& named);
// The roles of one part only (a ParamSpec::block value: kEmbeddingBlock, a block, or L for the final
// norm and head), from `named` holding that part's views; every other role stays undefined.
DecoderWeights decoder_part_weights(const DecoderNames& names, const NamedTensors& named, int64_t part);

}  // namespace tessera
