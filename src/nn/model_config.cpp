// Decoder config validation and parameter counts.
#include "nn/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "nn/decoder_layout.h"

namespace tessera {

void ModelConfig::validate() const {
  TS_CHECK(num_layers > 0, "model: num_layers must be positive, got ", num_layers);
  TS_CHECK(num_heads > 0, "model: num_heads must be positive, got ", num_heads);
  TS_CHECK(channels > 0, "model: channels must be positive, got ", channels);
  TS_CHECK(vocab_size > 0, "model: vocab_size must be positive, got ", vocab_size);
  TS_CHECK(max_seq_len > 0, "model: max_seq_len must be positive, got ", max_seq_len);
  TS_CHECK(attention_window >= 0, "model: attention_window must be 0 (none) or positive, got ", attention_window);
  TS_CHECK(head_dim > 0 || channels % num_heads == 0, "model: num_heads (", num_heads, ") does not divide channels (",
           channels, "); choose heads so that channels / heads is a whole number");
  TS_CHECK(num_kv_heads >= 0 && num_heads % kv_heads() == 0, "model: num_kv_heads (", num_kv_heads,
           ") must divide num_heads (", num_heads, "); grouped-query attention shares each kv head among ",
           "num_heads / num_kv_heads query heads (with --heads, give a multiple of ", kv_heads(), ")");
  TS_CHECK(mlp_hidden >= 0, "model: mlp_hidden must not be negative (0 = 4 x channels), got ", mlp_hidden);
  TS_CHECK(norm_eps > 0.0f, "model: norm_eps must be positive, got ", norm_eps);
  TS_CHECK(norm == NormKind::rmsnorm || norm_eps == 1e-5f,
           "model: LayerNorm is implemented with eps 1e-5 (GPT-2's, Pythia's, Cohere's); use RMSNorm otherwise");
  if (positions == PositionKind::rope) {
    TS_CHECK(head_size() % 2 == 0, "model: rotary embeddings need an even head size, got channels / num_heads = ",
             head_size());
    TS_CHECK(rope.theta > 1.0f, "model: rope_theta must be above 1, got ", rope.theta);
    TS_CHECK(rotary_dims >= 0 && rotary_dims % 2 == 0 && rotary_dims <= head_size() &&
                 (!mla.enabled() || rotary_dims == 0),
             "model: rotary_dims (", rotary_dims, ") must be even and at most the head size (", head_size(),
             "), 0 for all of it (latent attention: its rope_dim)");
    const auto positive = [](const std::vector<float>& f) {
      return std::all_of(f.begin(), f.end(), [](float x) { return std::isfinite(x) && x > 0; });
    };
    TS_CHECK(!rope.longrope || (!rope.yarn && rope.factor > 0 && rope.original_max_positions > 0 &&
                                int64_t(rope.short_factor.size()) == rotary_dim() / 2 &&
                                int64_t(rope.long_factor.size()) == rotary_dim() / 2 && positive(rope.short_factor) &&
                                positive(rope.long_factor)),
             "model: longrope rope_scaling needs a positive factor and original_max_position_embeddings, and ",
             rotary_dim() / 2, " positive short and long factors (half the ", rotary_dim(), " rotated channels), got ",
             rope.short_factor.size(), " and ", rope.long_factor.size());
    TS_CHECK(!rope.linear || (rope.factor >= 1.0f && !rope.yarn && !rope.longrope),
             "model: linear rope_scaling needs factor >= 1, got ", rope.factor);
    TS_CHECK(rope.factor == 0.0f || rope.yarn || rope.longrope || rope.linear ||
                 (rope.factor >= 1.0f && rope.high_freq_factor > rope.low_freq_factor && rope.original_max_positions > 0),
             "model: llama3 rope_scaling needs factor >= 1, high_freq_factor > low_freq_factor and a positive ",
             "original_max_position_embeddings");
    TS_CHECK(!rope.yarn || (rope.factor >= 1.0f && rope.beta_fast > 0.0f && rope.beta_slow > 0.0f &&
                            rope.original_max_positions > 0 && rope.mscale >= 0.0f && rope.mscale_all_dim >= 0.0f &&
                            rope.attention_factor >= 0.0f),
             "model: yarn rope_scaling needs factor >= 1, positive beta_fast, beta_slow and ",
             "original_max_position_embeddings, and mscale, mscale_all_dim and attention_factor >= 0 (0 = absent)");
  }
  // A list of blocks (global_layers, nope_layers): blocks of the model, ascending, each once.
  const auto check_blocks = [&](const char* name, const std::vector<int64_t>& blocks) {
    for (size_t i = 0; i < blocks.size(); ++i)
      TS_CHECK(blocks[i] >= 0 && blocks[i] < num_layers && (i == 0 || blocks[i] > blocks[i - 1]), "model: ", name,
               " must name blocks 0..", num_layers - 1, " in ascending order, each once; got ", blocks[i],
               " at index ", i);
  };
  TS_CHECK(global_layers.empty() || attention_window > 0, "model: global_layers name the blocks of a windowed ",
           "model that do not slide; it has no attention_window");
  check_blocks("global_layers", global_layers);
  TS_CHECK(local_rope_theta == 0.0f ||
               (attention_window > 0 && positions == PositionKind::rope && local_rope_theta > 1.0f),
           "model: local_rope_theta (", local_rope_theta, ") is the sliding blocks' RoPE base: it needs a ",
           "windowed RoPE model and must be above 1");
  TS_CHECK(attention_scalar >= 0.0f && std::isfinite(attention_scalar), "model: attention_scalar must be positive ",
           "(0: the head size), got ", attention_scalar);
  for (const auto& [name, cap] : {std::pair{"attention_softcap", attention_softcap}, {"logit_softcap", logit_softcap}})
    TS_CHECK(cap >= 0.0f && std::isfinite(cap), "model: ", name, " must be positive (0: not capped), got ", cap);
  TS_CHECK(!scaled_embeddings || positions == PositionKind::rope,
           "model: scaled embeddings are Gemma's, a RoPE model's; learned positions would be scaled with them");
  TS_CHECK(nope_layers.empty() || (positions == PositionKind::rope && !mla.enabled()),
           "model: layers without RoPE (nope_layers) need a RoPE model without latent attention");
  check_blocks("nope_layers", nope_layers);
  TS_CHECK(!qk_norm || naming == Naming::llama, "model: query/key norms are a Llama-family (Qwen3) feature; ",
           "GPT-2's naming has none");
  TS_CHECK(!phi3 || (naming == Naming::llama && positions == PositionKind::rope && norm == NormKind::rmsnorm &&
                     mlp == MlpKind::swiglu && !bias && !qkv_bias && !qk_norm && !moe.enabled() && !mla.enabled()),
           "model: the Phi-3 form is Llama's computation: Llama naming, RoPE, RMSNorm, SwiGLU, no biases, no q/k "
           "norms, no experts, no latent attention");
  TS_CHECK(!parallel_residual || (norm_placement == NormPlacement::pre && !moe.enabled() && !mla.enabled()),
           "model: parallel_residual (GPT-NeoX's) runs pre-norm blocks with dense MLPs and no latent attention");
  TS_CHECK(!head_bias || !tied_embeddings, "model: head_bias is a bias of an untied head (Phi-2's lm_head.bias); "
                                           "the embedding has none");
  TS_CHECK(!shared_norm || parallel_residual, "model: shared_norm feeds both sublayers of a parallel block from one "
                                              "norm; it needs parallel_residual");
  TS_CHECK(logit_scale >= 0.0f && std::isfinite(logit_scale), "model: logit_scale must be positive (0: none), got ",
           logit_scale);
  TS_CHECK(!qk_norm_all_heads || qk_norm, "model: qk_norm_all_heads says how the query/key norms span the heads; ",
           "it needs qk_norm");
  TS_CHECK(norm_placement == NormPlacement::pre ||
               (naming == Naming::llama && norm == NormKind::rmsnorm && !phi3 && !moe.enabled() && !mla.enabled()),
           "model: norms after the sublayers are OLMo 2's and Gemma's: Llama naming, RMSNorm, dense MLPs, no latent "
           "attention");
  if (mla.enabled()) {
    TS_CHECK(naming == Naming::llama && positions == PositionKind::rope && norm == NormKind::rmsnorm && !bias &&
                 !qkv_bias && !qk_norm,
             "model: latent attention is DeepSeek's: Llama naming, RoPE, RMSNorm, no biases, no q/k norms");
    TS_CHECK(kv_heads() == num_heads, "model: latent attention gives every head its own key and value; num_kv_heads (",
             num_kv_heads, ") must be num_heads (", num_heads, ") or 0");
    TS_CHECK(mla.q_rank >= 0 && mla.nope_dim >= 0 && mla.rope_dim > 0 && mla.rope_dim % 2 == 0 && mla.v_dim > 0,
             "model: latent attention needs q_rank >= 0, nope_dim >= 0, an even rope_dim > 0 and v_dim > 0, got ",
             mla.q_rank, ", ", mla.nope_dim, ", ", mla.rope_dim, ", ", mla.v_dim);
    TS_CHECK(mla.v_dim <= head_size(), "model: latent attention's v_dim (", mla.v_dim,
             ") must not exceed nope_dim + rope_dim (", head_size(), "): Tessera pads each value head to a q/k head");
  }
  TS_CHECK(moe.routed_scale > 0.0f, "model: moe routed_scale must be positive, got ", moe.routed_scale);
  if (moe.enabled()) {
    TS_CHECK(moe.top_k >= 1 && moe.top_k <= moe.num_experts, "model: moe top_k (", moe.top_k,
             ") must be between 1 and the number of experts (", moe.num_experts, ")");
    TS_CHECK(moe.expert_hidden > 0, "model: moe expert_hidden must be positive, got ", moe.expert_hidden);
    TS_CHECK(moe.num_shared_experts >= 0, "model: moe num_shared_experts must not be negative, got ",
             moe.num_shared_experts);
    TS_CHECK(!moe.shared_gate || moe.num_shared_experts > 0, "model: moe shared_gate gates the shared experts' ",
             "output, but the model has none (num_shared_experts 0)");
    TS_CHECK(moe.first_dense_layers >= 0 && moe.first_dense_layers < num_layers, "model: moe first_dense_layers (",
             moe.first_dense_layers, ") must leave at least one of the ", num_layers, " layers a MoE layer (with ",
             "--layers, give more than ", moe.first_dense_layers, ")");
    TS_CHECK(mlp == MlpKind::swiglu, "model: MoE experts are SwiGLU MLPs; set the MLP kind to swiglu");
    const bool two_each = moe.router != RouterKind::sigmoid_bias || moe.kept_groups == moe.groups ||
                          moe.num_experts / std::max<int64_t>(moe.groups, 1) >= 2;
    TS_CHECK(moe.groups >= 1 && moe.num_experts % moe.groups == 0 && moe.kept_groups >= 1 &&
                 moe.kept_groups <= moe.groups && two_each,
             "model: moe groups (", moe.groups, ") must divide the ", moe.num_experts, " experts and kept_groups (",
             moe.kept_groups, ") lie between 1 and them, with 2 experts a group or more under sigmoid routing");
    const int64_t kept_experts = moe.kept_groups * (moe.num_experts / moe.groups);
    TS_CHECK(moe.top_k <= kept_experts, "model: moe top_k (", moe.top_k, ") exceeds the ", kept_experts,
             " experts of the kept groups (", moe.kept_groups, " of ", moe.groups,
             "): a token would take an expert of a dropped group");
  }
}

RopeScales ModelConfig::rope_scales() const {
  RopeScales scales{rope_rotated_scale(rope), 1.0f};
  if (mla.enabled() && rope.yarn && rope.factor > 0 && rope.mscale_all_dim > 0) {
    const double m = yarn_mscale(rope.factor, rope.mscale_all_dim);
    scales.query = float(m * m);
  }
  // Gemma's scores times query_pre_attn_scalar^-1/2: the queries times sqrt(HS / scalar).
  if (attention_scalar > 0) scales.query = float(scales.query * std::sqrt(double(head_size()) / attention_scalar));
  return scales;
}

int64_t ModelConfig::num_parameters() const { return decoder_layout(*this).total(); }

int64_t ModelConfig::active_parameters() const {
  if (!moe.enabled()) return num_parameters();
  const int64_t per_expert = 3 * moe.expert_hidden * channels;
  const int64_t moe_layers = num_layers - moe.first_dense_layers;
  return num_parameters() - moe_layers * (moe.num_experts - moe.top_k) * per_expert;
}

std::string gpu_unsupported(const ModelConfig& config) {
  const bool capped = config.attention_softcap > 0 || config.logit_softcap > 0;
  const char* what = capped                                ? "soft-caps its attention scores and logits"
                     : config.moe.shared_gate              ? "gates its shared experts by a sigmoid"
                     : config.mlp == MlpKind::gelu_exact ? "takes GELU's exact (erf) form in its MLP"
                     : config.norm == NormKind::layernorm && !config.bias ? "layer-normalises without biases"
                                                                          : nullptr;
  return what ? model_family(config) + " " + what + ", which no GPU kernel does yet" : "";
}

std::string model_family(const ModelConfig& config) {
  if (config.mla.enabled()) return config.moe.router == RouterKind::sigmoid_bias ? "deepseek-v3" : "deepseek-v2";
  if (config.moe.enabled()) {
    if (config.moe.router == RouterKind::sigmoid_bias)
      return config.qkv_bias || config.rotary_dims > 0 ? "glm4-moe" : "deepseek-moe";
    if (config.moe.shared_gate) return "qwen2-moe";
    return config.qk_norm_all_heads ? "olmoe" : config.qk_norm ? "qwen3-moe" : "mixtral";
  }
  if (config.shared_norm) return config.head_bias ? "phi" : config.attention_window > 0 ? "cohere2" : "cohere";
  if (config.parallel_residual || config.mlp == MlpKind::gelu_exact) return "gpt-neox";
  if (config.naming == Naming::gpt2) return "gpt2";
  if (config.phi3) return "phi3";
  if (config.norm == NormKind::layernorm) return "starcoder2";
  if (config.norm_placement == NormPlacement::post) return "olmo2";
  if (config.norm_placement == NormPlacement::sandwich) return config.qk_norm ? "gemma3" : "gemma2";
  if (config.scaled_embeddings) return "gemma";
  if (!config.nope_layers.empty() && !config.qk_norm && !config.qkv_bias) return "smollm3";
  return config.qk_norm ? "qwen3" : config.qkv_bias ? "qwen2" : "llama";
}

std::string model_summary(const ModelConfig& config) {
  auto millions = [](int64_t n) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2fM", double(n) / 1e6);
    return std::string(text);
  };
  std::string line = model_family(config) + ", " + std::to_string(config.num_layers) + " layers, " +
                     std::to_string(config.channels) + " wide, " + std::to_string(config.num_heads) + " heads";
  if (config.kv_heads() != config.num_heads) line += " (" + std::to_string(config.kv_heads()) + " kv)";
  if (config.mla.enabled())
    line += " (latent attention: kv rank " + std::to_string(config.mla.kv_rank) +
            (config.mla.q_rank > 0 ? ", q rank " + std::to_string(config.mla.q_rank) : "") + ")";
  else if (config.head_dim > 0)
    line += " of " + std::to_string(config.head_dim);
  if (config.moe.enabled())
    line += ", " + std::to_string(config.moe.num_experts) + " experts (top " + std::to_string(config.moe.top_k) + ")";
  const int64_t parameters = config.num_parameters(), active = config.active_parameters();
  line += ", vocabulary " + std::to_string(config.vocab_size) + ": " + millions(parameters) + " parameters";
  if (active != parameters) line += " (" + millions(active) + " active per token)";
  return line;
}

}  // namespace tessera
