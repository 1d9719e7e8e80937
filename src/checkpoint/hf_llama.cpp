// The Llama / Mixtral name map and config.json translation. Each HF tensor is a contiguous piece of
// one of our packed parameters (a block of rows, or one expert's slice); see hf_llama.h.
#include "checkpoint/hf_llama.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <system_error>

#include "checkpoint/hf_config_reader.h"
#include "checkpoint/hf_deepseek.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_rope_rows.h"
#include "checkpoint/hf_source.h"
#include "checkpoint/hf_weight_files.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"
#include "nn/decoder_layout.h"

namespace tessera {
namespace {

using nlohmann::json;

// GLM-4.5's form: Llama's attention (q/k/v biases or not, per-head q/k norms or not, partial rotary) over
// DeepSeek-V3's sigmoid-routed experts, without latent attention.
bool glm4_moe_form(const ModelConfig& c) {
  return c.moe.enabled() && c.moe.router == RouterKind::sigmoid_bias && !c.mla.enabled();
}

// Cohere's form: Llama's attention and SwiGLU side by side on one LayerNorm without biases, the logits scaled,
// RoPE over interleaved pairs (reordered on import and export); Cohere2's with a window.
bool cohere_form(const ModelConfig& c) { return c.shared_norm && !c.head_bias; }
bool cohere2_form(const ModelConfig& c) { return cohere_form(c) && c.attention_window > 0; }

// Cohere2's sliding_window_pattern P when its global blocks are every P-th (P - 1, 2P - 1, ...), else 0.
int64_t cohere2_pattern(const ModelConfig& c) {
  if (c.global_layers.empty()) return 0;
  const int64_t P = c.global_layers.front() + 1;
  std::vector<int64_t> every;
  for (int64_t l = P - 1; l < c.num_layers; l += P) every.push_back(l);
  return every == c.global_layers ? P : 0;
}

std::vector<HfPiece> hf_llama_pieces(const ModelConfig& c) {
  const DecoderNames names = decoder_names(c);
  const ParameterLayout whole = decoder_layout(c);
  const int64_t C = c.channels, V = c.vocab_size, HS = c.head_size();
  const int64_t q = c.num_heads * HS, kv = c.kv_heads() * HS, F = c.hidden(), Fe = c.moe.expert_hidden;
  const bool pre = has_pre_norms(c.norm_placement), post = has_post_norms(c.norm_placement);
  const bool sandwich = pre && post;  // Gemma: pre_feedforward_layernorm before the MLP
  // q_proj and k_proj are (NH·HS, C) and (NKV·HS, C), o_proj (C, NH·HS), whatever C is (Qwen3's heads
  // are wider than hidden_size / num_attention_heads).
  std::vector<HfPiece> pieces = {{"model.embed_tokens.weight", {V, C}, names.embed, 0}};
  // A weight and, where ours has one, its bias (StarCoder2's every projection and LayerNorm).
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const BlockNames& b = names.blocks[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (pre) add_linear_pieces(pieces, p + "input_layernorm", {C}, b.norm1);  // OLMo 2 has none
    if (c.mla.enabled()) {  // DeepSeek's latent attention: our names and shapes are its own
      for (const std::string* n : {&b.q_proj.weight, &b.q_a.weight, &b.q_a_norm, &b.q_b.weight, &b.kv_a.weight,
                                   &b.kv_a_norm, &b.kv_b.weight})
        if (!n->empty()) pieces.push_back({"model." + *n, whole.find(*n).shape, *n, 0});
    } else if (c.phi3) {  // Phi-3's fused projection: q, k and v rows, as ours
      pieces.push_back({p + "self_attn.qkv_proj.weight", {q + 2 * kv, C}, b.qkv.weight, 0});
    } else {  // with Qwen2's biases, and StarCoder2's
      add_linear_pieces(pieces, p + "self_attn.q_proj", {q, C}, b.qkv, 0);
      add_linear_pieces(pieces, p + "self_attn.k_proj", {kv, C}, b.qkv, q);
      add_linear_pieces(pieces, p + "self_attn.v_proj", {kv, C}, b.qkv, q + kv);
    }
    if (c.qk_norm) {
      pieces.push_back({p + "self_attn.q_norm.weight", {c.qk_norm_all_heads ? q : HS}, b.q_norm, 0});
      pieces.push_back({p + "self_attn.k_norm.weight", {c.qk_norm_all_heads ? kv : HS}, b.k_norm, 0});
    }
    add_linear_pieces(pieces, p + "self_attn.o_proj", {C, c.value_width()}, b.attn_out);
    if (post) add_linear_pieces(pieces, p + "post_attention_layernorm", {C}, b.norm1_post);
    if (pre && !c.shared_norm)  // Cohere's one norm feeds both sublayers
      add_linear_pieces(pieces, p + (sandwich ? "pre_feedforward_layernorm" : "post_attention_layernorm"), {C},
                        b.norm2);
    if (post) add_linear_pieces(pieces, p + "post_feedforward_layernorm", {C}, b.norm2_post);
    if (c.phi3) {  // gate and up rows, as ours
      pieces.push_back({p + "mlp.gate_up_proj.weight", {2 * F, C}, b.mlp_in.weight, 0});
      pieces.push_back({p + "mlp.down_proj.weight", {C, F}, b.mlp_out.weight, 0});
      continue;
    }
    if (!is_gated(c.mlp)) {  // StarCoder2's GELU MLP
      add_linear_pieces(pieces, p + "mlp.c_fc", {F, C}, b.mlp_in);
      add_linear_pieces(pieces, p + "mlp.c_proj", {C, F}, b.mlp_out);
      continue;
    }
    if (!c.is_moe_block(l)) {
      pieces.push_back({p + "mlp.gate_proj.weight", {F, C}, b.mlp_in.weight, 0});
      pieces.push_back({p + "mlp.up_proj.weight", {F, C}, b.mlp_in.weight, F * C});
      pieces.push_back({p + "mlp.down_proj.weight", {C, F}, b.mlp_out.weight, 0});
      continue;
    }
    // Mixtral's block_sparse_moe (experts' w1 gate, w3 up, w2 down), or Qwen3-MoE's, OLMoE's, Qwen2-MoE's
    // and DeepSeek-V3's mlp (gate_proj, up_proj, down_proj), each a router `gate` over the experts;
    // DeepSeek-V3's router has its selection bias, its mlp the shared experts; Qwen2-MoE's mlp one shared
    // expert and its gate.
    const bool mixtral_names = !c.qk_norm && !c.mla.enabled() && !c.moe.shared_gate && !glm4_moe_form(c);
    const std::string m = p + (mixtral_names ? "block_sparse_moe." : "mlp.");
    const char* gate = mixtral_names ? "w1.weight" : "gate_proj.weight";
    const char* up = mixtral_names ? "w3.weight" : "up_proj.weight";
    const char* down = mixtral_names ? "w2.weight" : "down_proj.weight";
    pieces.push_back({m + "gate.weight", {c.moe.num_experts, C}, b.router, 0});
    if (!b.router_bias.empty())
      pieces.push_back({m + "gate.e_score_correction_bias", {c.moe.num_experts}, b.router_bias, 0});
    if (const int64_t Fs = c.moe.num_shared_experts * Fe; Fs > 0) {
      const std::string s = m + (c.moe.shared_gate ? "shared_expert." : "shared_experts.");
      pieces.push_back({s + "gate_proj.weight", {Fs, C}, b.shared_in.weight, 0});
      pieces.push_back({s + "up_proj.weight", {Fs, C}, b.shared_in.weight, Fs * C});
      pieces.push_back({s + "down_proj.weight", {C, Fs}, b.shared_out.weight, 0});
      if (c.moe.shared_gate) pieces.push_back({m + "shared_expert_gate.weight", {1, C}, b.shared_gate, 0});
    }
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      const std::string x = m + "experts." + std::to_string(e) + ".";
      pieces.push_back({x + gate, {Fe, C}, b.experts_in, (2 * e) * Fe * C});
      pieces.push_back({x + up, {Fe, C}, b.experts_in, (2 * e + 1) * Fe * C});
      pieces.push_back({x + down, {C, Fe}, b.experts_out, e * C * Fe});
    }
  }
  add_linear_pieces(pieces, "model.norm", {C}, names.final_norm);
  if (!c.tied_embeddings) pieces.push_back({"lm_head.weight", {V, C}, names.head, 0});
  return pieces;
}

// Gemma's form: scaled embeddings, and norms before each sublayer (Gemma 1) or on both sides of it (Gemma 2
// and 3); its RMSNorms multiply by (1 + weight), so each gain is stored less 1 (`to_hf`) and read back plus 1.
// Gemma 3's has q/k norms, Gemma 2's not.
bool gemma_form(const ModelConfig& c) { return c.scaled_embeddings && c.norm_placement != NormPlacement::post; }
bool gemma1_form(const ModelConfig& c) { return gemma_form(c) && c.norm_placement == NormPlacement::pre; }
bool gemma2_form(const ModelConfig& c) {
  return gemma_form(c) && c.norm_placement == NormPlacement::sandwich && !c.qk_norm;
}
void offset_gemma_gains(const ModelConfig& c, const std::string& name, float* values, int64_t n, bool to_hf) {
  if (!gemma_form(c) || !(name.ends_with("norm.weight") || name.ends_with("layernorm.weight"))) return;
  for (int64_t i = 0; i < n; ++i) values[i] += to_hf ? -1.0f : 1.0f;
}

// SmolLM3's blocks without RoPE: those whose entry in no_rope_layers is 0 (1: RoPE), or without the
// list every no_rope_layer_interval-th (default 4: blocks 3, 7, 11, ...), as transformers builds it.
std::vector<int64_t> smollm3_nope_layers(const HfConfigReader& r, int64_t layers) {
  std::vector<int64_t> nope;
  const json* list = r.find("no_rope_layers");
  if (!list) {
    const int64_t interval = r.integer("no_rope_layer_interval", 4);
    for (int64_t l = 0; l < layers; ++l)
      if ((l + 1) % interval == 0) nope.push_back(l);
    return nope;
  }
  const auto flag = [](const json& x) { return x == 0 || x == 1; };
  TS_CHECK(list->is_array() && int64_t(list->size()) >= layers && std::all_of(list->begin(), list->end(), flag),
           r.where(), ": field 'no_rope_layers' must hold a 0 (no RoPE) or 1 for each of the ", layers,
           " layers, got ", json_excerpt(*list));
  for (int64_t l = 0; l < layers; ++l)
    if ((*list)[size_t(l)] == 0) nope.push_back(l);
  return nope;
}

// The blocks a config's layer_types (transformers' per-layer attention kinds) names "full_attention",
// or none without the field.
std::optional<std::vector<int64_t>> full_attention_layers(const HfConfigReader& r, int64_t layers) {
  const json* types = r.find("layer_types");
  if (!types) return std::nullopt;
  const auto known = [](const json& t) { return t == "sliding_attention" || t == "full_attention"; };
  TS_CHECK(types->is_array() && int64_t(types->size()) == layers && std::all_of(types->begin(), types->end(), known),
           r.where(), ": field 'layer_types' must name each of the ", layers,
           " layers \"sliding_attention\" or \"full_attention\", got ", json_excerpt(*types));
  std::vector<int64_t> full;
  for (int64_t l = 0; l < layers; ++l)
    if ((*types)[size_t(l)] == "full_attention") full.push_back(l);
  return full;
}

// transformers' layer_types: each block's "sliding_attention" or "full_attention".
json layer_types_json(const ModelConfig& c) {
  json types = json::array();
  for (int64_t l = 0; l < c.num_layers; ++l) types.push_back(c.slides(l) ? "sliding_attention" : "full_attention");
  return types;
}

// transformers writes only what differs from a config class's defaults (Gemma 3 4B-27B's text_config
// names five fields): Gemma3TextConfig's for the sizes.
json with_gemma3_defaults(json config) {
  const std::pair<const char*, int64_t> defaults[] = {{"vocab_size", 262208},        {"hidden_size", 2304},
                                                      {"intermediate_size", 9216},   {"num_hidden_layers", 26},
                                                      {"num_attention_heads", 8},    {"num_key_value_heads", 4},
                                                      {"head_dim", 256}};
  for (const auto& [key, value] : defaults)
    if (!config.contains(key) || config[key].is_null()) config[key] = value;
  return config;
}

// Gemma 2 and 3 (Gemma2ForCausalLM, Gemma3ForCausalLM): norms on both sides of each sublayer, embeddings
// times sqrt(C), GeGLU, sliding layers (layer_types, or every `pattern`-th global), scores by
// query_pre_attn_scalar; the (1 + w) gains are offset_gemma_gains'.
void read_gemma(const HfConfigReader& r, ModelConfig& c, int64_t pattern) {
  r.expect("hidden_activation", "gelu_pytorch_tanh", "Gemma's GeGLU takes GELU's tanh form");
  c.norm_placement = NormPlacement::sandwich;
  c.mlp = MlpKind::geglu;
  c.scaled_embeddings = true;
  c.attention_window = r.integer("sliding_window", 4096);
  if (const double scalar = r.number("query_pre_attn_scalar", 256.0f); scalar != double(c.head_size()))
    c.attention_scalar = float(scalar);
  if (const std::optional<std::vector<int64_t>> full = full_attention_layers(r, c.num_layers)) {
    c.global_layers = *full;
    return;
  }
  for (int64_t l = pattern - 1; l < c.num_layers; l += pattern) c.global_layers.push_back(l);
}

// Gemma (1): Gemma's (1 + w) RMSNorms before each sublayer, embeddings times sqrt(C), GeGLU, heads of
// head_dim; no window, caps or q/k norms. hidden_activation absent runs GELU's tanh form, as transformers
// does (the releases' hidden_act "gelu" is not read).
void read_gemma1(const HfConfigReader& r, ModelConfig& c) {
  r.expect("hidden_activation", "gelu_pytorch_tanh", "Gemma's GeGLU takes GELU's tanh form");
  c.mlp = MlpKind::geglu;
  c.scaled_embeddings = true;
}

// Gemma 2: every other block slides (the first does), one RoPE base, attention scores and logits soft-capped
// (Gemma2Config's 50 and 30 when the fields are absent, none when null).
void read_gemma2(const HfConfigReader& r, ModelConfig& c) {
  read_gemma(r, c, 2);
  c.attention_softcap = r.number_or_null("attn_logit_softcapping", 50.0f);
  c.logit_softcap = r.number_or_null("final_logit_softcapping", 30.0f);
}

// Gemma 3: per-head q/k norms, every sliding_window_pattern-th block global, the sliding ones with their own
// unscaled RoPE base, no soft caps.
void read_gemma3(const HfConfigReader& r, ModelConfig& c) {
  r.expect("final_logit_softcapping", json(), "Gemma 3 does not cap its logits (Gemma 2 does)");
  r.expect("attn_logit_softcapping", json(), "Gemma 3 does not cap its attention scores (Gemma 2 does)");
  r.expect("use_bidirectional_attention", false, "Tessera's attention is causal");
  read_gemma(r, c, r.integer("sliding_window_pattern", 6));
  c.qk_norm = true;
  c.local_rope_theta = r.number("rope_local_base_freq", 1e4f);
}

// StarCoder2 (Starcoder2ForCausalLM): LayerNorms (norm_epsilon), biases on every projection and norm, a
// GELU (tanh) MLP of c_fc and c_proj. Its dropouts are a training choice Tessera does not make: read,
// not applied.
void read_starcoder2(const HfConfigReader& r, ModelConfig& c) {
  const json* act = r.find("hidden_act");
  TS_CHECK(!act || *act == "gelu_pytorch_tanh" || *act == "gelu_new", r.where(), ": field 'hidden_act' is ",
           json_excerpt(*act), ", expected \"gelu_pytorch_tanh\" (Tessera's GELU is its tanh form)");
  r.expect("use_bias", true, "Tessera's StarCoder2 has biases on every projection, as its LayerNorms do");
  c.norm = NormKind::layernorm;
  c.bias = true;
  c.mlp = MlpKind::gelu;
  c.norm_eps = r.number("norm_epsilon", 1e-5f);
}

// Cohere (CohereForCausalLM: Command-R, Aya): attention and MLP side by side on one LayerNorm without biases
// (layer_norm_eps), the logits times logit_scale; Command R+'s per-head q/k LayerNorms and RoPE scaling refused.
void read_cohere(const HfConfigReader& r, ModelConfig& c) {
  r.expect("use_qk_norm", false, "Tessera's Cohere has no per-head q/k LayerNorms (Command R+'s)");
  r.expect("rope_scaling", json(), "Tessera's Cohere does not scale RoPE");
  c.norm = NormKind::layernorm;
  c.parallel_residual = true;
  c.shared_norm = true;
  c.logit_scale = r.number("logit_scale", 0.0625f);
}

// Cohere2 (Cohere2ForCausalLM: Command R7B, Command A): Cohere's blocks sliding over sliding_window positions with
// RoPE, but the full-attention ones (layer_types, or every sliding_window_pattern-th), which take no RoPE.
void read_cohere2(const HfConfigReader& r, ModelConfig& c) {
  c.attention_window = r.integer("sliding_window", 4096);
  const std::optional<std::vector<int64_t>> full = full_attention_layers(r, c.num_layers);
  const int64_t pattern = r.integer("sliding_window_pattern", 4);
  c.global_layers.clear();
  if (full)
    c.global_layers = *full;
  else
    for (int64_t l = pattern - 1; l < c.num_layers; l += pattern) c.global_layers.push_back(l);
  c.nope_layers = c.global_layers;
}

// Qwen2 and Qwen3: with use_sliding_window, the blocks from max_window_layers on slide over
// sliding_window positions and the first ones attend to the whole context (layer_types, where given,
// names each block's kind instead), as transformers builds its layer_types. Qwen3-MoE's attention
// slides in every block. A window as long as the context slides nothing.
void read_qwen_window(const HfConfigReader& r, ModelConfig& c, bool every_block) {
  const std::optional<std::vector<int64_t>> full =
      every_block ? std::nullopt : full_attention_layers(r, c.num_layers);
  const json* window = r.find("sliding_window");
  if (!r.boolean("use_sliding_window", false) || !window || window->is_null()) {
    TS_CHECK(!full || int64_t(full->size()) == c.num_layers, r.where(), ": field 'layer_types' names sliding ",
             "layers, but the model has no window (use_sliding_window false or sliding_window null)");
    return;
  }
  TS_CHECK(window->is_number_integer() && window->get<int64_t>() > 0, r.where(), ": field 'sliding_window' is ",
           json_excerpt(*window), ", expected a positive number of positions");
  std::vector<int64_t> global = full.value_or(std::vector<int64_t>{});
  if (!full && !every_block)
    for (int64_t l = 0; l < std::min(r.count("max_window_layers", 28), c.num_layers); ++l) global.push_back(l);
  if (window->get<int64_t>() >= c.max_seq_len || int64_t(global.size()) == c.num_layers) return;
  c.attention_window = window->get<int64_t>();
  c.global_layers = global;
}

// Qwen's window: use_sliding_window, its sliding_window, and the leading full-attention blocks as
// max_window_layers, with layer_types naming every block's kind (which transformers reads first, so a
// model whose full blocks do not lead keeps them). Qwen3-MoE slides in every block or none.
void write_qwen_window(const ModelConfig& c, bool every_block, json& j) {
  j["use_sliding_window"] = c.attention_window > 0;
  if (c.attention_window == 0) return;
  TS_CHECK(!every_block || c.global_layers.empty(), "cannot export a Qwen3-MoE model with blocks that do not slide ",
           "(global_layers): transformers' Qwen3-MoE attention slides in every block or none");
  int64_t leading = 0;
  while (leading < c.num_layers && !c.slides(leading)) ++leading;
  j["max_window_layers"] = leading;
  if (!every_block) j["layer_types"] = layer_types_json(c);
}

// Where a folder keeps the text model's tensors: as Gemma3ForCausalLM and every other family does
// (model.*, lm_head.weight), or beside a vision tower, as Gemma 3 4B-27B's Gemma3ForConditionalGeneration
// (transformers 4.50's language_model.model.* and language_model.lm_head.weight, or 4.52's
// model.language_model.* and lm_head.weight).
struct TextModelNames {
  std::string model = "model.", head = "lm_head.weight";

  explicit TextModelNames(const HfWeightFiles& files) {
    if (files.contains("language_model.model.embed_tokens.weight")) {
      model = "language_model.model.";
      head = "language_model.lm_head.weight";
    } else if (files.contains("model.language_model.embed_tokens.weight")) {
      model = "model.language_model.";
    }
  }
  // The stored name of transformers' text-model name (model.*, lm_head.weight), and back (none for a
  // tensor of the vision tower or its projector, which Tessera does not read).
  std::string stored(const std::string& name) const {
    return name.starts_with("model.") ? model + name.substr(6) : name == "lm_head.weight" ? head : name;
  }
  std::optional<std::string> text_name(const std::string& stored) const {
    if (stored.starts_with(model)) return "model." + stored.substr(model.size());
    if (stored == head) return "lm_head.weight";
    if (model != "model." && is_vision(stored)) return std::nullopt;
    return stored;
  }

 private:
  static bool is_vision(const std::string& name) {
    for (const char* prefix :
         {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."})
      if (name.starts_with(prefix)) return true;
    return false;
  }
};

// Whether save_hf_llama has a Hugging Face form for `c`: StarCoder2's (LayerNorms, biases everywhere, a
// GELU MLP, nothing else), Cohere's, or one of the RMSNorm families' with the features its form has.
bool has_hf_llama_form(const ModelConfig& c) {
  if (c.naming != Naming::llama || c.positions != PositionKind::rope) return false;
  if (cohere_form(c)) {  // Cohere2: its global blocks every P-th, those alone without RoPE
    const bool layers = c.attention_window == 0 ? c.nope_layers.empty() && c.global_layers.empty()
                                                : cohere2_pattern(c) > 0 && c.nope_layers == c.global_layers;
    return c.norm == NormKind::layernorm && !c.bias && c.mlp == MlpKind::swiglu && !c.qkv_bias && !c.qk_norm &&
           !c.moe.enabled() && !c.mla.enabled() && !c.phi3 && layers && c.local_rope_theta == 0 &&
           c.attention_scalar == 0 && !c.scaled_embeddings && c.rotary_dims == 0 && c.attention_softcap == 0 &&
           c.logit_softcap == 0 && c.head_dim == 0 && c.rope == RopeConfig{.theta = c.rope.theta};
  }
  if (c.parallel_residual || c.logit_scale > 0) return false;  // GPT-NeoX's blocks have a form of their own
  // Soft caps are Gemma 2's alone, whose blocks all turn by one RoPE base; a gated shared expert Qwen2-MoE's.
  const bool capped = c.attention_softcap > 0 || c.logit_softcap > 0;
  if (gemma2_form(c) ? c.local_rope_theta != 0 : capped) return false;
  const bool qwen2_moe_form = c.qkv_bias && c.moe.shared_gate && !c.qk_norm && !c.mla.enabled();
  if (c.moe.shared_gate != qwen2_moe_form || (qwen2_moe_form && c.attention_window > 0)) return false;
  // Partial rotary is Phi-3's and GLM-4.5's (their first channels rotate, moved on import and export).
  if (c.rotary_dims > 0 && !c.phi3 && !glm4_moe_form(c)) return false;
  // GLM-4.5: pre-norm blocks of Llama's attention (q/k/v biases, per-head q/k norms) over DeepSeek-V3's experts.
  if (glm4_moe_form(c))
    return c.mlp == MlpKind::swiglu && !c.bias && !c.qk_norm_all_heads && !c.phi3 &&
           c.norm_placement == NormPlacement::pre && c.attention_window == 0 && c.nope_layers.empty() &&
           c.attention_scalar == 0 && !c.scaled_embeddings;
  // Gemma 1 has no window, q/k norms, score scalar or local RoPE base.
  if (gemma1_form(c) && (c.attention_window > 0 || c.qk_norm || c.attention_scalar != 0 || c.local_rope_theta != 0))
    return false;
  if (c.norm == NormKind::layernorm)
    return c.bias && c.mlp == MlpKind::gelu && !c.qkv_bias && !c.qk_norm && !c.moe.enabled() && !c.mla.enabled() &&
           !c.phi3 && c.norm_placement == NormPlacement::pre && c.nope_layers.empty() && c.global_layers.empty() &&
           c.local_rope_theta == 0 && c.attention_scalar == 0 && !c.scaled_embeddings && c.rotary_dims == 0;
  const bool gemma = gemma_form(c), post = c.norm_placement == NormPlacement::post;
  const bool qwen3_moe_form = c.qk_norm && c.moe.enabled();  // and OLMoE's
  // Qwen2's and Qwen3's first max_window_layers blocks attend to the whole sequence.
  const bool qwen_windows = (c.qkv_bias || (c.qk_norm && !c.qk_norm_all_heads)) && !c.moe.enabled();
  const bool moe_form = hf_deepseek_exportable(c) ||
                        (!c.mla.enabled() && (c.moe.num_shared_experts == 0 || qwen2_moe_form) &&
                         c.moe.first_dense_layers == 0 && c.moe.router == RouterKind::softmax_topk &&
                         c.moe.routed_scale == 1.0f && (c.moe.renormalize || qwen3_moe_form || qwen2_moe_form));
  const bool gemma_features = gemma || ((c.global_layers.empty() || qwen_windows) && c.local_rope_theta == 0 &&
                                        c.attention_scalar == 0 && !c.scaled_embeddings &&
                                        c.norm_placement != NormPlacement::sandwich);
  const bool nope_form = c.nope_layers.empty() || (!c.qk_norm && !c.qkv_bias && !c.moe.enabled() && !c.phi3 &&
                                                   c.attention_window == 0);
  return (c.mlp == MlpKind::swiglu || (gemma && c.mlp == MlpKind::geglu)) && !c.bias && moe_form &&
         !(c.qkv_bias && c.moe.enabled() && !qwen2_moe_form) && !(c.qk_norm && c.qkv_bias) &&
         (post ? c.qk_norm_all_heads : !c.qk_norm_all_heads || c.moe.enabled()) && gemma_features && nope_form &&
         !(c.qk_norm_all_heads && c.attention_window > 0);
}

// The block index of a tensor named model.layers.{l}..., or none.
std::optional<int64_t> layer_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (!name.starts_with(prefix)) return std::nullopt;
  int64_t layer = 0;
  const char* first = name.data() + prefix.size();
  const auto [end, error] = std::from_chars(first, name.data() + name.size(), layer);
  if (error != std::errc() || end == first || *end != '.') return std::nullopt;
  return layer;
}

}  // namespace

bool is_hf_llama_type(const json& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3" ||
         model_type == "qwen3_moe" || model_type == "mixtral" || model_type == "phi3" || model_type == "olmo2" ||
         model_type == "olmoe" || model_type == "smollm3" || model_type == "gemma" || model_type == "gemma2" ||
         model_type == "gemma3_text" || model_type == "starcoder2" || model_type == "qwen2_moe" ||
         model_type == "glm4_moe" || model_type == "cohere" || model_type == "cohere2";
}

ModelConfig hf_llama_config(const json& given, const std::filesystem::path& path) {
  const json config = given.value("model_type", json()) == "gemma3_text" ? with_gemma3_defaults(given) : given;
  const HfConfigReader r(config, path);
  const json* type = r.find("model_type");
  TS_CHECK(type && is_hf_llama_type(*type), r.where(), ": field 'model_type' is ", type ? json_excerpt(*type) : "missing",
           "; expected \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"qwen3_moe\", \"mixtral\", \"phi3\", ",
           "\"olmo2\", \"olmoe\", \"smollm3\", \"gemma\", \"gemma2\", \"gemma3_text\", \"starcoder2\", ",
           "\"qwen2_moe\", \"glm4_moe\", \"cohere\" or \"cohere2\"");
  const bool mixtral = *type == "mixtral", qwen2 = *type == "qwen2", qwen3_moe = *type == "qwen3_moe";
  const bool qwen2_moe = *type == "qwen2_moe", glm4_moe = *type == "glm4_moe";
  const bool cohere2 = *type == "cohere2", cohere = *type == "cohere" || cohere2;
  const bool phi3 = *type == "phi3", olmo2 = *type == "olmo2", olmoe = *type == "olmoe", smollm3 = *type == "smollm3";
  const bool gemma1 = *type == "gemma", gemma2 = *type == "gemma2", gemma3 = *type == "gemma3_text";
  const bool starcoder2 = *type == "starcoder2", gemma = gemma1 || gemma2 || gemma3;
  const bool qwen3 = *type == "qwen3" || qwen3_moe;
  if (!gemma && !starcoder2) r.expect("hidden_act", "silu", "Llama-style MLPs are SwiGLU (silu)");
  // Llama's attention_bias puts biases on o_proj too; Qwen2's q, k and v biases need no field. GLM-4.5's
  // attention_bias means q, k and v alone.
  if (!glm4_moe) r.expect("attention_bias", false, "Tessera's Llama has biases on q, k and v alone (Qwen2's)");
  r.expect("mlp_bias", false, "Tessera's Llama has no MLP biases");
  // SmolLM3's records its pretraining's 2, which its model (Qwen2's) never reads.
  if (!smollm3) r.expect("pretraining_tp", 1, "tensor-parallel pretraining slices are not emulated");
  if (!qwen2 && !qwen3) r.expect("use_sliding_window", false, "sliding windows are read for Qwen's models only");

  ModelConfig c = llama_family_config(r);
  c.qkv_bias = qwen2 || qwen2_moe || (glm4_moe && r.boolean("attention_bias", false));
  r.expect("clip_qkv", json(), "Tessera does not clip the query, key and value projections");  // OLMoE's
  c.qk_norm = qwen3 || olmo2 || olmoe || (glm4_moe && r.boolean("use_qk_norm", false));
  c.qk_norm_all_heads = olmo2 || olmoe;  // OLMo 2's with its norms after attention and the MLP
  if (olmo2) c.norm_placement = NormPlacement::post;
  c.phi3 = phi3;
  c.max_seq_len =
      r.integer("max_position_embeddings",
                mixtral || qwen2_moe ? 32768
                : olmoe || starcoder2 ? 4096
                : gemma3 || glm4_moe  ? 131072
                : gemma1 || gemma2 || cohere ? 8192
                                      : 2048);
  // Mistral, Mixtral and Phi-3 may window their attention (Qwen's window is off without use_sliding_window;
  // Gemma's slides some layers only).
  if (const json* window = r.find("sliding_window");
      window && !qwen2 && !qwen2_moe && !qwen3 && !olmo2 && !olmoe && !smollm3 && !gemma && !glm4_moe && !cohere) {
    TS_CHECK(window->is_number_integer() && window->get<int64_t>() > 0, r.where(), ": field 'sliding_window' is ",
             json_excerpt(*window), ", expected a positive number of positions or null");
    if (window->get<int64_t>() < c.max_seq_len) c.attention_window = window->get<int64_t>();
  }
  c.num_kv_heads = r.integer("num_key_value_heads", smollm3 ? 4 : starcoder2 ? 2 : c.num_heads);
  c.mlp_hidden = r.integer("intermediate_size");
  c.norm_eps = cohere ? r.number("layer_norm_eps", 1e-5f)
                      : r.number("rms_norm_eps", mixtral || olmo2 || olmoe || glm4_moe ? 1e-5f : 1e-6f);
  c.rope.theta = r.number("rope_theta", mixtral || gemma3 ? 1e6f : smollm3 ? 2e6f : 1e4f);
  c.tied_embeddings = r.boolean("tie_word_embeddings", smollm3 || gemma || starcoder2 || cohere);
  if (smollm3) c.nope_layers = smollm3_nope_layers(r, c.num_layers);
  if (qwen2 || qwen3) read_qwen_window(r, c, qwen3_moe);
  // Heads of head_dim channels, which need not be hidden_size / num_attention_heads (Qwen3's are not).
  if (r.find("head_dim") || gemma) {
    const int64_t head_dim = r.integer("head_dim", 256);  // Gemma's default
    if (c.channels % c.num_heads != 0 || head_dim != c.channels / c.num_heads) c.head_dim = head_dim;
  }
  if (gemma1) read_gemma1(r, c);
  if (gemma2) read_gemma2(r, c);
  if (gemma3) read_gemma3(r, c);
  if (starcoder2) read_starcoder2(r, c);
  if (cohere) read_cohere(r, c);
  if (cohere2) read_cohere2(r, c);
  if (phi3 || glm4_moe)  // partial rotary (Phi-4-mini's, GLM-4.5's)
    c.rotary_dims = read_rotary_dims(r, "partial_rotary_factor", glm4_moe ? 0.5f : 1.0f, c.head_size());
  if (const json* scaling = r.find("rope_scaling")) read_rope_scaling(r, *scaling, c.max_seq_len, c.rope);
  if (mixtral) {
    c.moe.num_experts = r.integer("num_local_experts", 8);
    c.moe.top_k = r.integer("num_experts_per_tok", 2);
    c.moe.expert_hidden = c.mlp_hidden;
  }
  if (olmoe) {  // softmax top-k routing in every layer, not renormalised unless norm_topk_prob says so
    c.moe.renormalize = r.boolean("norm_topk_prob", false);
    c.moe.num_experts = r.integer("num_experts", 64);
    c.moe.top_k = r.integer("num_experts_per_tok", 8);
    c.moe.expert_hidden = c.mlp_hidden;
  }
  if (qwen3_moe || qwen2_moe) {  // softmax top-k routing, renormalised (as Mixtral's) or not, in every layer
    c.moe.renormalize = r.boolean("norm_topk_prob", false);
    r.expect("decoder_sparse_step", 1, "every layer of Tessera's MoE models past the first dense ones is a MoE layer");
    r.expect("mlp_only_layers", json::array(), "Tessera's MoE models have no dense layers between MoE layers");
    c.moe.num_experts = r.integer("num_experts");
    c.moe.top_k = r.integer("num_experts_per_tok");
    c.moe.expert_hidden = r.integer("moe_intermediate_size");
  }
  if (glm4_moe) {  // DeepSeek-V3's routing: sigmoid scores and a selection bias, groups, shared experts, dense first
    read_deepseek_experts(r, c);
    c.moe.router = RouterKind::sigmoid_bias;
    c.moe.renormalize = r.boolean("norm_topk_prob", true);
    c.moe.routed_scale = r.number("routed_scaling_factor", 1.0f);
    c.moe.groups = r.integer("n_group", 1);
    c.moe.kept_groups = r.integer("topk_group", 1);
  }
  if (qwen2_moe) {  // one shared expert, gated a token; Tessera's shared experts are whole experts' widths
    r.expect("qkv_bias", true, "Qwen2-MoE's q, k and v projections have biases");
    const int64_t shared = r.integer("shared_expert_intermediate_size");
    TS_CHECK(shared % c.moe.expert_hidden == 0, r.where(), ": field 'shared_expert_intermediate_size' (", shared,
             ") is not a multiple of moe_intermediate_size (", c.moe.expert_hidden,
             "): Tessera's shared experts are a whole number of experts wide");
    c.moe.num_shared_experts = shared / c.moe.expert_hidden;
    c.moe.shared_gate = true;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    TS_FAIL(r.where(), ": ", e.what());
  }
  return c;
}

json hf_llama_config_json(const ModelConfig& c) {
  const bool olmo2 = c.norm_placement == NormPlacement::post, olmoe = c.qk_norm_all_heads && c.moe.enabled();
  const bool cohere = cohere_form(c), cohere2 = cohere2_form(c), smollm3 = !c.nope_layers.empty() && !cohere;
  const bool starcoder2 = c.norm == NormKind::layernorm && !cohere;
  const bool gemma = gemma_form(c), gemma1 = gemma1_form(c), gemma2 = gemma2_form(c);
  const bool gemma3 = gemma && !gemma1 && !gemma2;
  const bool glm4_moe = glm4_moe_form(c);
  const bool qwen3 = c.qk_norm && !c.qk_norm_all_heads && !gemma && !glm4_moe, qwen3_moe = qwen3 && c.moe.enabled();
  const bool qwen2_moe = c.moe.shared_gate, qwen2 = c.qkv_bias && !qwen2_moe && !glm4_moe;
  const bool mixtral = c.moe.enabled() && !qwen3 && !olmoe && !qwen2_moe && !glm4_moe;
  const bool mistral = !mixtral && !qwen2 && !qwen2_moe && !qwen3 && !c.phi3 && !c.qk_norm_all_heads && !smollm3 &&
                       !gemma && !starcoder2 && !glm4_moe && c.attention_window > 0;
  const char* architecture = cohere2      ? "Cohere2ForCausalLM"
                             : cohere     ? "CohereForCausalLM"
                             : starcoder2 ? "Starcoder2ForCausalLM"
                             : glm4_moe   ? "Glm4MoeForCausalLM"
                             : mixtral    ? "MixtralForCausalLM"
                             : olmoe      ? "OlmoeForCausalLM"
                             : qwen2      ? "Qwen2ForCausalLM"
                             : qwen2_moe  ? "Qwen2MoeForCausalLM"
                             : qwen3_moe  ? "Qwen3MoeForCausalLM"
                             : qwen3      ? "Qwen3ForCausalLM"
                             : c.phi3     ? "Phi3ForCausalLM"
                             : olmo2      ? "Olmo2ForCausalLM"
                             : smollm3    ? "SmolLM3ForCausalLM"
                             : gemma1     ? "GemmaForCausalLM"
                             : gemma2     ? "Gemma2ForCausalLM"
                             : gemma3     ? "Gemma3ForCausalLM"
                             : mistral    ? "MistralForCausalLM"
                                          : "LlamaForCausalLM";
  const char* type = cohere2      ? "cohere2"
                     : cohere     ? "cohere"
                     : starcoder2 ? "starcoder2"
                     : glm4_moe   ? "glm4_moe"
                     : mixtral    ? "mixtral"
                     : olmoe      ? "olmoe"
                     : qwen2      ? "qwen2"
                     : qwen2_moe  ? "qwen2_moe"
                     : qwen3_moe  ? "qwen3_moe"
                     : qwen3      ? "qwen3"
                     : c.phi3     ? "phi3"
                     : olmo2      ? "olmo2"
                     : smollm3    ? "smollm3"
                     : gemma1     ? "gemma"
                     : gemma2     ? "gemma2"
                     : gemma3     ? "gemma3_text"
                     : mistral    ? "mistral"
                                  : "llama";
  json j = {{"architectures", json::array({architecture})},
            {"model_type", type},
            {"hidden_size", c.channels},
            {"intermediate_size", mixtral || olmoe ? c.moe.expert_hidden : c.hidden()},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.kv_heads()},
            {"head_dim", c.head_size()},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_seq_len},
            {"rms_norm_eps", json_float(c.norm_eps)},
            {"rope_theta", json_float(c.rope.theta)},
            {"rope_scaling", rope_scaling_json(c.rope)},
            {"hidden_act", gemma || starcoder2 ? "gelu_pytorch_tanh" : "silu"},
            {"tie_word_embeddings", c.tied_embeddings},
            {"initializer_range", 0.02}};
  if (cohere) {  // its eps under its own key, the logits' scale, no q/k norms; heads are hidden_size / heads
    j.erase("rms_norm_eps");
    j.erase("head_dim");
    j["layer_norm_eps"] = json_float(c.norm_eps);
    j["logit_scale"] = json_float(c.logit_scale);
    j["use_qk_norm"] = false;
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    if (cohere2) {  // both spellings of its blocks' kinds: transformers 4.5x reads the pattern
      j["sliding_window"] = c.attention_window;
      j["sliding_window_pattern"] = cohere2_pattern(c);
      j["layer_types"] = layer_types_json(c);
    }
  } else if (starcoder2) {  // its eps under its own key, biases everywhere, no dropout
    j.erase("rms_norm_eps");
    j["norm_epsilon"] = json_float(c.norm_eps);
    j["use_bias"] = true;
    j["embedding_dropout"] = j["residual_dropout"] = j["attention_dropout"] = 0.0;
  } else if (mixtral) {
    j["num_local_experts"] = c.moe.num_experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["output_router_logits"] = false;  // as Mixtral's own config: HF's loss is then the language model's
  } else if (glm4_moe) {  // DeepSeek-V3's experts and routing; q/k/v biases, q/k norms and partial rotary
    j["attention_bias"] = c.qkv_bias;
    j["use_qk_norm"] = c.qk_norm;
    j["partial_rotary_factor"] = partial_rotary_factor(c.rotary_dim(), c.head_size());
    j["n_routed_experts"] = c.moe.num_experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["moe_intermediate_size"] = c.moe.expert_hidden;
    j["n_shared_experts"] = c.moe.num_shared_experts;
    j["first_k_dense_replace"] = c.moe.first_dense_layers;
    j["routed_scaling_factor"] = json_float(c.moe.routed_scale);
    j["norm_topk_prob"] = c.moe.renormalize;
    j["n_group"] = c.moe.groups;
    j["topk_group"] = c.moe.kept_groups;
    j["num_nextn_predict_layers"] = 0;
    j["attention_dropout"] = 0.0;
  } else if (qwen2_moe) {  // its experts, one shared expert of their widths and its gate; no window
    j["num_experts"] = c.moe.num_experts;
    j["num_experts_per_tok"] = c.moe.top_k;
    j["moe_intermediate_size"] = c.moe.expert_hidden;
    j["shared_expert_intermediate_size"] = c.moe.num_shared_experts * c.moe.expert_hidden;
    j["norm_topk_prob"] = c.moe.renormalize;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = json::array();
    j["output_router_logits"] = false;
    j["qkv_bias"] = true;
    j["use_sliding_window"] = false;
  } else if (qwen2 || qwen3) {
    write_qwen_window(c, qwen3_moe, j);
    if (qwen3) j["attention_bias"] = false;
    if (qwen3_moe) {
      j["num_experts"] = c.moe.num_experts;
      j["num_experts_per_tok"] = c.moe.top_k;
      j["moe_intermediate_size"] = c.moe.expert_hidden;
      j["norm_topk_prob"] = c.moe.renormalize;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = json::array();
      j["output_router_logits"] = false;
    }
  } else if (c.phi3) {  // no dropout
    j["original_max_position_embeddings"] = c.rope.longrope ? c.rope.original_max_positions : c.max_seq_len;
    j["partial_rotary_factor"] = partial_rotary_factor(c.rotary_dim(), c.head_size());
    j["resid_pdrop"] = j["embd_pdrop"] = j["attention_dropout"] = 0.0;
  } else if (gemma1) {
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
  } else if (gemma) {  // its layers' kinds, their window, the scores' scalar, Gemma 2's caps, Gemma 3's local base
    const auto cap = [](float v) { return v > 0 ? json(json_float(v)) : json(); };
    j["layer_types"] = layer_types_json(c);
    j["sliding_window"] = c.attention_window;
    j["query_pre_attn_scalar"] = c.attention_scalar > 0 ? json(json_float(c.attention_scalar)) : json(c.head_size());
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["attn_logit_softcapping"] = cap(c.attention_softcap);
    j["final_logit_softcapping"] = cap(c.logit_softcap);
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    if (gemma3) {
      j["rope_local_base_freq"] = json_float(c.local_rope_theta > 0 ? c.local_rope_theta : c.rope.theta);
      j["use_bidirectional_attention"] = false;
    }
  } else if (olmo2 || olmoe) {
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    if (olmoe) {
      j["clip_qkv"] = nullptr;
      j["num_experts"] = c.moe.num_experts;
      j["num_experts_per_tok"] = c.moe.top_k;
      j["norm_topk_prob"] = c.moe.renormalize;
      j["output_router_logits"] = false;
    }
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    if (smollm3) {  // a 1 for each block that takes RoPE, 0 for one that does not
      json rope_layers = json::array();
      for (int64_t l = 0; l < c.num_layers; ++l) rope_layers.push_back(c.rotates(l) ? 1 : 0);
      j["no_rope_layers"] = rope_layers;
      j["use_sliding_window"] = false;
    }
  }
  if ((c.phi3 || c.attention_window > 0) && !gemma)
    j["sliding_window"] = c.attention_window > 0 ? json(c.attention_window) : json();
  return j;
}

HfSource open_hf_llama(const std::filesystem::path& dir, const ModelConfig& config) {
  config.validate();
  auto files = std::make_shared<const HfWeightFiles>(dir);
  HfSource source;
  source.pieces = hf_llama_pieces(config);
  const std::string family = model_family(config);
  std::set<std::string> expected;
  for (const HfPiece& p : source.pieces) expected.insert(p.hf);
  const HfDeepseekFiles deepseek =
      config.mla.enabled() || glm4_moe_form(config) ? hf_deepseek_files(dir) : HfDeepseekFiles{};
  const TextModelNames names(*files);
  for (const std::string& stored : files->names()) {
    const std::optional<std::string> text_name = names.text_name(stored);
    if (!text_name) continue;  // Gemma 3's vision tower and projector
    const std::string& name = *text_name;
    if (expected.count(name) || name.ends_with(".rotary_emb.inv_freq")) continue;  // a buffer older exports keep
    if (const std::optional<int64_t> layer = layer_of(name);
        layer && *layer >= config.num_layers && *layer < config.num_layers + deepseek.prediction_layers)
      continue;  // DeepSeek-V3's and GLM-4.5's multi-token-prediction layers: not the model Tessera trains
    const bool tied_head = name == "lm_head.weight" && config.tied_embeddings;
    TS_CHECK(tied_head, "Hugging Face weights ", files->description(), ": unexpected tensor ", quoted_text(stored, 80),
             " for a ", family, " with ", config.num_layers, " layers",
             config.moe.enabled() ? "" : " and dense MLPs", " (weights of another model?)");
  }
  for (const HfPiece& p : source.pieces) files->check(names.stored(p.hf), p.hf_shape);
  // Rows in Tessera's channel order, as the export writes them back: DeepSeek's interleaved RoPE tails
  // and Phi-3's leading rotary rows moved to where Tessera's RoPE turns them (other tensors as they are).
  const bool interleaved = config.mla.enabled() && deepseek.rope_interleaved;
  source.read = [files, config, interleaved, names](const std::string& name) {
    std::vector<float> values = files->read_f32(names.stored(name));
    if (interleaved) deinterleave_rope_rows(config, name, values.data(), int64_t(values.size()));
    move_rotary_rows(config, name, values.data(), false);
    if (cohere_form(config)) reorder_interleaved_heads(config, name, values.data(), false);
    offset_gemma_gains(config, name, values.data(), int64_t(values.size()), false);
    return values;
  };
  return source;
}

void load_hf_llama(const std::filesystem::path& dir, const ModelConfig& config, NamedTensors& params) {
  load_hf_source(open_hf_llama(dir, config), config, params, "load_hf_llama");
}

void save_hf_llama(const std::filesystem::path& dir, const ModelConfig& config, const NamedTensors& params,
                   int64_t max_shard_bytes) {
  save_hf_llama(dir, config, values_of_named(decoder_layout(config), params, "save_hf_llama"), max_shard_bytes);
}

void save_hf_llama(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                   int64_t max_shard_bytes, const HfTokenIds& ids, HfWeightType type) {
  config.validate();
  const bool deepseek = hf_deepseek_exportable(config);
  TS_CHECK(has_hf_llama_form(config), "save_hf_llama: a ", model_family(config), " model has no LlamaForCausalLM, ",
           "Qwen2ForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, ",
           "Phi3ForCausalLM, Olmo2ForCausalLM, OlmoeForCausalLM, SmolLM3ForCausalLM, Gemma2ForCausalLM, ",
           "Gemma3ForCausalLM, Starcoder2ForCausalLM, CohereForCausalLM, DeepseekV2ForCausalLM or DeepseekV3ForCausalLM ",
           "form");
  const HfTensorEdit to_hf = [&config](const std::string& name, float* out, int64_t n) {
    if (config.mla.enabled()) interleave_rope_rows(config, name, out, n);
    move_rotary_rows(config, name, out, true);
    if (cohere_form(config)) reorder_interleaved_heads(config, name, out, true);
    offset_gemma_gains(config, name, out, n, true);
  };
  write_hf_folder(dir, config, hf_llama_pieces(config), values, to_hf,
                  deepseek ? hf_deepseek_config_json(config) : hf_llama_config_json(config), max_shard_bytes, ids,
                  type, "save_hf_llama");
}

}  // namespace tessera
