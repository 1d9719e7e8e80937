// The Phi-1.5 / Phi-2 name map and config.json translation (see hf_phi.h).
#include "checkpoint/hf_phi.h"

#include <string>
#include <vector>

#include "checkpoint/hf_config_reader.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_rope_rows.h"
#include "core/error.h"
#include "data/json_excerpt.h"
#include "nn/decoder_layout.h"

namespace tessera {
namespace {

using nlohmann::json;

// Each HF tensor and where it lands in ours: q, k and v rows into the packed qkv, the rest whole parameters (the
// embedding, head and head bias their first V rows of Vp).
std::vector<HfPiece> hf_phi_pieces(const ModelConfig& c) {
  const DecoderNames names = decoder_names(c);
  const int64_t C = c.channels, V = c.vocab_size, F = c.hidden();
  const int64_t q = c.num_heads * c.head_size(), kv = c.kv_heads() * c.head_size();
  std::vector<HfPiece> pieces = {{"model.embed_tokens.weight", {V, C}, names.embed, 0}};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const BlockNames& b = names.blocks[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add_linear_pieces(pieces, p + "input_layernorm", {C}, b.norm1);
    add_linear_pieces(pieces, p + "self_attn.q_proj", {q, C}, b.qkv, 0);
    add_linear_pieces(pieces, p + "self_attn.k_proj", {kv, C}, b.qkv, q);
    add_linear_pieces(pieces, p + "self_attn.v_proj", {kv, C}, b.qkv, q + kv);
    add_linear_pieces(pieces, p + "self_attn.dense", {C, q}, b.attn_out);
    add_linear_pieces(pieces, p + "mlp.fc1", {F, C}, b.mlp_in);
    add_linear_pieces(pieces, p + "mlp.fc2", {C, F}, b.mlp_out);
  }
  add_linear_pieces(pieces, "model.final_layernorm", {C}, names.final_norm);
  add_linear_pieces(pieces, "lm_head", {V, C}, LinearNames{names.head, names.head_bias});
  return pieces;
}

json hf_phi_config_json(const ModelConfig& c) {
  return {{"architectures", {"PhiForCausalLM"}},
          {"model_type", "phi"},
          {"hidden_size", c.channels},
          {"intermediate_size", c.hidden()},
          {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", c.kv_heads()},
          {"num_hidden_layers", c.num_layers},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_seq_len},
          {"layer_norm_eps", json_float(c.norm_eps)},
          {"partial_rotary_factor", partial_rotary_factor(c.rotary_dim(), c.head_size())},
          {"rope_theta", json_float(c.rope.theta)},
          {"rope_scaling", nullptr},
          {"qk_layernorm", false},
          {"hidden_act", c.mlp == MlpKind::gelu_exact ? "gelu" : "gelu_new"},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"tie_word_embeddings", false},
          {"use_cache", true}};
}

}  // namespace

ModelConfig hf_phi_config(const json& config, const std::filesystem::path& path) {
  const HfConfigReader r(config, path);
  r.expect("model_type", "phi", "this reader is Phi's");
  r.expect("qk_layernorm", false, "Tessera's Phi has no q/k LayerNorms");
  r.expect("rope_scaling", json(), "Tessera's Phi does not scale RoPE");
  r.expect("tie_word_embeddings", false, "Phi's head is its own, with a bias");
  ModelConfig c = llama_family_config(r);
  c.norm = NormKind::layernorm;
  c.bias = true;
  // Phi-1.5's and Phi-2's "gelu_new" (as gelu_fast and gelu_pytorch_tanh) is GELU's tanh form; "gelu" the exact one.
  const json* act = r.find("hidden_act");
  const bool tanh_form = !act || *act == "gelu_new" || *act == "gelu_fast" || *act == "gelu_pytorch_tanh";
  TS_CHECK(tanh_form || *act == "gelu", r.where(), ": field 'hidden_act' is ", json_excerpt(*act),
           ", expected \"gelu_new\" (GELU's tanh form) or \"gelu\": Tessera's Phi MLP is a GELU");
  c.mlp = tanh_form ? MlpKind::gelu : MlpKind::gelu_exact;
  c.parallel_residual = true;
  c.shared_norm = true;
  c.head_bias = true;
  c.tied_embeddings = false;
  c.num_kv_heads = r.integer("num_key_value_heads", c.num_heads);
  c.mlp_hidden = r.integer("intermediate_size");
  c.max_seq_len = r.integer("max_position_embeddings", 2048);
  c.norm_eps = r.number("layer_norm_eps", 1e-5f);
  c.rope.theta = r.number("rope_theta", 1e4f);
  try {
    TS_CHECK(c.channels % c.num_heads == 0, "hidden_size (", c.channels, ") must be a multiple of ",
             "num_attention_heads (", c.num_heads, ")");
    c.rotary_dims = read_rotary_dims(r, "partial_rotary_factor", 0.5f, c.head_size());
    c.validate();
  } catch (const Error& e) {
    TS_FAIL(r.where(), ": ", e.what());
  }
  return c;
}

bool has_hf_phi_form(const ModelConfig& c) {
  const RopeConfig plain{.theta = c.rope.theta};
  return c.shared_norm && c.head_bias && c.naming == Naming::llama && c.norm == NormKind::layernorm && c.bias &&
         (c.mlp == MlpKind::gelu || c.mlp == MlpKind::gelu_exact) && c.positions == PositionKind::rope &&
         c.rope == plain && c.head_dim == 0 && !c.qk_norm && !c.phi3 && !c.moe.enabled() && !c.mla.enabled() &&
         c.attention_window == 0 && c.nope_layers.empty() && c.attention_scalar == 0 && !c.scaled_embeddings &&
         c.attention_softcap == 0 && c.logit_softcap == 0 && c.logit_scale == 0;
}

HfSource open_hf_phi(const std::filesystem::path& dir, const ModelConfig& config) {
  config.validate();
  TS_CHECK(has_hf_phi_form(config), "open_hf_phi: a ", model_family(config), " model is not Phi-2's");
  const auto skipped = [](const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); };
  return checked_hf_source(dir, hf_phi_pieces(config), skipped,
                           "a phi with " + std::to_string(config.num_layers) + " layers",
                           [config](const std::string& name, float* values) {
                             move_rotary_rows(config, name, values, false);
                           });
}

void save_hf_phi(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                 int64_t max_shard_bytes, const HfTokenIds& ids, HfWeightType type) {
  config.validate();
  TS_CHECK(has_hf_phi_form(config), "save_hf_phi: a ", model_family(config), " model has no PhiForCausalLM form");
  TS_CHECK(!type.fp8.enabled(), "Phi has no fine-grained FP8 form in transformers: export it in bf16 or fp16");
  const HfTensorEdit to_hf = [&config](const std::string& name, float* out, int64_t) {
    move_rotary_rows(config, name, out, true);
  };
  write_hf_folder(dir, config, hf_phi_pieces(config), values, to_hf, hf_phi_config_json(config), max_shard_bytes, ids,
                  type, "save_hf_phi");
}

}  // namespace tessera
