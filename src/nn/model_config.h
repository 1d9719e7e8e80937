// The decoder's hyper-parameters. GPT-2, Llama and the Mixture-of-Experts models are one decoder
// (embedding -> blocks -> final norm -> head) that differs only by this data: the norm kind, the
// position scheme, the MLP kind (dense GELU, dense SwiGLU, or a MoE of SwiGLU experts), biases,
// grouped-query heads, per-head query/key norms, DeepSeek's latent attention and tied embeddings. The
// vocabulary is padded internally to a multiple of 128 (padded_vocab_size); padding rows of the
// embedding and head are never predicted.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/rope.h"

namespace tessera {

enum class NormKind { layernorm, rmsnorm };
// Where a block's norms sit: on each sublayer's input (norm1, norm2), on its output inside the residual
// branch (norm1_post, norm2_post), or both. The final norm follows the last block in every placement.
enum class NormPlacement {
  pre,       // mid = x + attention(norm1(x)), out = mid + mlp(norm2(mid)) (GPT-2, Llama)
  post,      // mid = x + norm1_post(attention(x)), out = mid + norm2_post(mlp(mid)) (OLMo 2)
  sandwich,  // mid = x + norm1_post(attention(norm1(x))), out = mid + norm2_post(mlp(norm2(mid))) (Gemma 2, 3)
};
inline bool has_pre_norms(NormPlacement p) { return p != NormPlacement::post; }
inline bool has_post_norms(NormPlacement p) { return p != NormPlacement::pre; }
enum class PositionKind { learned, rope };  // a learned (maxT, C) table added to the embedding, or RoPE
// The dense MLP's activation (and the experts', SwiGLU, when MoE): GELU (its tanh form, GPT-2's; gelu_exact its
// erf form, GPT-NeoX's), or a gated unit whose input packs [gate | up] (SwiGLU: silu gate; GeGLU: GELU's tanh
// form, Gemma's).
enum class MlpKind { gelu, swiglu, geglu, gelu_exact };
inline bool is_gated(MlpKind kind) { return kind == MlpKind::swiglu || kind == MlpKind::geglu; }
enum class RouterKind {
  softmax_topk,  // Mixtral: softmax over experts, top-k, weights renormalised to sum to 1 (or, DeepSeek-V2's
                 // and some Qwen MoEs', not: MoeConfig::renormalize)
  sigmoid_bias,  // DeepSeek-V3: sigmoid scores, top-k picked on score + a balancing bias, renormalised
};

// Parameter names follow one family's Hugging Face-like naming (h.{l}.attn.c_attn for GPT-2,
// layers.{l}.self_attn.qkv_proj for Llama and the MoE models).
enum class Naming { gpt2, llama };

struct MoeConfig {
  int64_t num_experts = 0;         // E routed experts; 0 = a dense MLP
  int64_t top_k = 2;               // experts per token
  int64_t expert_hidden = 0;       // each expert's SwiGLU width F_e
  int64_t num_shared_experts = 0;  // always-on experts (DeepSeek), one SwiGLU of num_shared * F_e
  bool shared_gate = false;        // the shared experts' output times sigmoid(x · w), a scalar a token from a
                                   // (1, C) gate (Qwen2-MoE's shared_expert_gate)
  RouterKind router = RouterKind::softmax_topk;
  int64_t first_dense_layers = 0;  // leading blocks with a dense MLP (DeepSeek's first_k_dense_replace)
  float routed_scale = 1.0f;       // the routed experts' output factor (DeepSeek-V3's routed_scaling_factor)
  bool renormalize = true;         // the chosen experts' weights divided by their sum (HF's norm_topk_prob)
  int64_t groups = 1, kept_groups = 1;  // DeepSeek's group-limited routing (n_group, topk_group): ops/moe_router.h
  bool enabled() const { return num_experts > 0; }
  bool operator==(const MoeConfig&) const = default;
};

// DeepSeek-V2/V3's multi-head latent attention (MLA): keys and values come from a low-rank latent of
// kv_rank channels through its own RMSNorm, queries from the input or from a latent of q_rank channels;
// each q/k head has nope_dim channels without positions and a rope_dim tail rotated by RoPE, the key's
// tail one for every head (read from the input beside the latent); values have v_dim channels a head.
struct LatentAttentionConfig {
  int64_t q_rank = 0;    // q_lora_rank; 0 = a full-rank q projection
  int64_t kv_rank = 0;   // kv_lora_rank; 0 = no latent attention
  int64_t nope_dim = 0;  // qk_nope_head_dim
  int64_t rope_dim = 0;  // qk_rope_head_dim
  int64_t v_dim = 0;     // v_head_dim
  bool enabled() const { return kv_rank > 0; }
  bool operator==(const LatentAttentionConfig&) const = default;
};
// The latents' RMSNorm eps: DeepSeek's (and Hugging Face's) q_a_layernorm and kv_a_layernorm take the
// default 1e-6 whatever rms_norm_eps says.
inline constexpr float kLatentNormEps = 1e-6f;

struct ModelConfig {
  int64_t num_layers = 12;     // L
  int64_t num_heads = 12;      // NH
  int64_t channels = 768;      // C = NH * HS
  int64_t vocab_size = 50257;  // V
  int64_t max_seq_len = 1024;  // maxT (context)
  // Hugging Face's sliding_window (Mistral 7B v0.1, Phi-3's 4K models): a token attends to the W latest
  // positions, itself included; 0 = none. Attention masks longer sequences so, in training, evaluation
  // and generation's key/value cache alike.
  int64_t attention_window = 0;
  // With a window, the blocks that attend over whole sequences (Gemma 3's full_attention layers),
  // ascending; empty: every block slides.
  std::vector<int64_t> global_layers = {};
  float local_rope_theta = 0;  // the sliding blocks' RoPE base, unscaled (Gemma's rope_local_base_freq); 0: rope's
  float attention_scalar = 0;  // scores scaled by attention_scalar^-1/2 (Gemma's query_pre_attn_scalar); 0: HS
  bool scaled_embeddings = false;  // the token embeddings times sqrt(C), float32-rounded (Gemma)
  // Gemma 2's soft caps, x -> cap tanh(x / cap): attention_softcap on every scaled attention score before the
  // mask and softmax (attn_logit_softcapping), logit_softcap on the head's logits before the loss and sampling
  // (final_logit_softcapping). 0: not capped. CPU only (ops/attention.h, ops/logit_softcap.h).
  float attention_softcap = 0;
  float logit_softcap = 0;
  float logit_scale = 0;  // the head's logits times this before the loss and sampling (Cohere's); 0: none

  Naming naming = Naming::gpt2;
  int64_t num_kv_heads = 0;  // NKV dividing NH (grouped-query attention); 0 = NH
  int64_t head_dim = 0;      // HS when it is not C / NH (a tensor-parallel rank's share of the heads); 0 = C / NH
  int64_t rotary_dims = 0;   // RoPE's channels of a head, its last (Phi-3's partial rotary); 0 = all of them
  int64_t mlp_hidden = 0;    // the dense MLP's width F; 0 = 4C
  NormKind norm = NormKind::layernorm;
  NormPlacement norm_placement = NormPlacement::pre;
  // GPT-NeoX's parallel residual (use_parallel_residual): out = x + attention(norm1(x)) + mlp(norm2(x)), both
  // sublayers reading the block's input; pre-norm blocks with dense MLPs only. With shared_norm one norm feeds
  // both (Cohere's): out = x + attention(norm1(x)) + mlp(norm1(x)), no norm2.
  bool parallel_residual = false;
  bool shared_norm = false;
  float norm_eps = 1e-5f;
  PositionKind positions = PositionKind::learned;
  RopeConfig rope = {};
  std::vector<int64_t> nope_layers = {};  // blocks whose attention takes no RoPE, ascending (SmolLM3's every 4th)
  MlpKind mlp = MlpKind::gelu;
  bool bias = true;             // biases on every linear layer and norm
  bool qkv_bias = false;        // biases on the attention's q, k and v projections alone (Qwen2)
  bool qk_norm = false;         // RMSNorm of every query and key head (HS channels, gains shared by the
                                // heads) before RoPE (Qwen3)
  bool qk_norm_all_heads = false;  // with qk_norm: one RMSNorm over all of a token's query heads (NH·HS
                                   // channels, a gain each) and one over its key heads (OLMo 2)
  bool tied_embeddings = true;  // the head reuses the token embedding
  bool head_bias = false;       // a bias on the head's logits (Phi-1.5's and Phi-2's lm_head.bias); untied heads only
  bool phi3 = false;            // Phi-3 and Phi-4: Llama's computation in Hugging Face's Phi3ForCausalLM form
                                // (q, k and v in one qkv_proj, gate and up in one gate_up_proj)
  MoeConfig moe = {};
  LatentAttentionConfig mla = {};  // enabled: the attention is DeepSeek's latent attention
  bool operator==(const ModelConfig&) const = default;

  int64_t padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }  // Vp
  // HS: a q/k head's channels (latent attention: nope_dim + rope_dim, its values padded to as many).
  int64_t head_size() const {
    return mla.enabled() ? mla.nope_dim + mla.rope_dim : head_dim > 0 ? head_dim : channels / num_heads;
  }
  // RoPE's channels a head, its last ones.
  int64_t rotary_dim() const { return mla.enabled() ? mla.rope_dim : rotary_dims > 0 ? rotary_dims : head_size(); }
  int64_t attention_width() const { return num_heads * head_size(); }  // the attention core's width (C unsharded)
  // RoPE's factors (ops/rope.h): YaRN's on the rotated channels and, under latent attention with YaRN's
  // mscale_all_dim, DeepSeek's on every attention score, mscale(factor, mscale_all_dim)^2 on the queries.
  RopeScales rope_scales() const;
  // The heads' values, o_proj's input: the core's width but under latent attention (NH * v_dim).
  int64_t value_width() const { return mla.enabled() ? num_heads * mla.v_dim : attention_width(); }
  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t qkv_width() const { return (num_heads + 2 * kv_heads()) * head_size(); }
  int64_t hidden() const { return mlp_hidden > 0 ? mlp_hidden : 4 * channels; }  // dense F
  bool is_moe_block(int64_t layer) const { return moe.enabled() && layer >= moe.first_dense_layers; }
  // Whether block `layer` attends within the window only, and turns by the local RoPE base.
  bool slides(int64_t layer) const {
    return attention_window > 0 && !std::binary_search(global_layers.begin(), global_layers.end(), layer);
  }
  bool local_rope(int64_t layer) const { return local_rope_theta > 0 && slides(layer); }
  float embedding_scale() const { return scaled_embeddings ? float(std::sqrt(double(channels))) : 1.0f; }
  // Whether block `layer`'s attention turns its queries and keys by RoPE.
  bool rotates(int64_t layer) const {
    return positions == PositionKind::rope && !std::binary_search(nope_layers.begin(), nope_layers.end(), layer);
  }
  // Throws tessera::Error naming the field when the config is unusable (e.g. heads not dividing C).
  void validate() const;
  // Number of parameters, padding rows included.
  int64_t num_parameters() const;
  // Parameters one token's forward multiplies by (MoE: only top_k routed experts), for MFU's 6N.
  int64_t active_parameters() const;
};

// Why the model cannot run on the GPU yet, naming its family and what it computes that no GPU kernel does
// ("gemma2 soft-caps its attention scores and logits, which no GPU kernel does yet"), or "": it runs there.
std::string gpu_unsupported(const ModelConfig& config);

// The family's name for messages: "gpt2", "llama", "phi3", "olmo2" (norms after the sublayers, q/k norms
// over all heads), "smollm3" (blocks without RoPE), "gemma" (scaled embeddings, pre-norm), "gemma2" (norms on
// both sides of each sublayer, soft caps), "gemma3" (norms on both sides of each sublayer, q/k norms),
// "qwen2" (q/k/v biases), "qwen3" (q/k norms), "mixtral", "qwen3-moe", "olmoe" (q/k norms over all heads),
// "qwen2-moe" (q/k/v biases, a gated shared expert), "deepseek-moe" (sigmoid routing), "glm4-moe" (sigmoid
// routing under q/k/v biases or partial rotary), "deepseek-v2" (latent attention) or "deepseek-v3" (both).
std::string model_family(const ModelConfig& config);

// One line for a run's start: "gpt2, 4 layers, 192 wide, 4 heads, vocabulary 4096: 2.66M parameters"
// (kv heads when grouped, the head size when not width / heads, experts when MoE, active parameters
// when they differ).
std::string model_summary(const ModelConfig& config);

}  // namespace tessera
