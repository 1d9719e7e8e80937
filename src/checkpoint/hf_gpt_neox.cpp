// The GPT-NeoX name map, its fused q/k/v row order and config.json translation (see hf_gpt_neox.h).
#include "checkpoint/hf_gpt_neox.h"

#include <string>
#include <vector>

#include "checkpoint/hf_config_reader.h"
#include "checkpoint/hf_export.h"
#include "core/error.h"
#include "data/json_excerpt.h"
#include "nn/decoder_layout.h"

namespace tessera {
namespace {

using nlohmann::json;

// Each HF tensor and where it lands in ours: every one a whole parameter (the embedding and head their first V
// rows of Vp).
std::vector<HfPiece> hf_gpt_neox_pieces(const ModelConfig& c) {
  const DecoderNames names = decoder_names(c);
  const int64_t C = c.channels, V = c.vocab_size, F = c.hidden();
  std::vector<HfPiece> pieces = {{"gpt_neox.embed_in.weight", {V, C}, names.embed, 0}};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const BlockNames& b = names.blocks[size_t(l)];
    const std::string p = "gpt_neox.layers." + std::to_string(l) + ".";
    add_linear_pieces(pieces, p + "input_layernorm", {C}, b.norm1);
    add_linear_pieces(pieces, p + "post_attention_layernorm", {C}, b.norm2);
    add_linear_pieces(pieces, p + "attention.query_key_value", {3 * C, C}, b.qkv);
    add_linear_pieces(pieces, p + "attention.dense", {C, C}, b.attn_out);
    add_linear_pieces(pieces, p + "mlp.dense_h_to_4h", {F, C}, b.mlp_in);
    add_linear_pieces(pieces, p + "mlp.dense_4h_to_h", {C, F}, b.mlp_out);
  }
  add_linear_pieces(pieces, "gpt_neox.final_layer_norm", {C}, names.final_norm);
  if (!c.tied_embeddings) pieces.push_back({"embed_out.weight", {V, C}, names.head, 0});
  return pieces;
}

// The row of ours that GPT-NeoX's fused q/k/v row `hf` is: HF's row h·3·HS + p·HS + d (head h, part p of q,
// k, v, channel d) is our p·C + h·HS + d', d' moving a q/k head's first R channels after its others.
int64_t our_qkv_row(const ModelConfig& c, int64_t hf) {
  const int64_t HS = c.head_size(), R = c.rotary_dim();
  const int64_t head = hf / (3 * HS), part = hf % (3 * HS) / HS, d = hf % HS;
  const int64_t channel = part == 2 || R == HS ? d : d < R ? HS - R + d : d - R;
  return part * c.channels + head * HS + channel;
}

// A query_key_value tensor's rows (weight: C values a row; bias: one) in our order (`to_hf`: back in HF's).
void reorder_qkv_rows(const ModelConfig& c, const std::string& name, float* values, bool to_hf) {
  if (!name.ends_with(".attention.query_key_value.weight") && !name.ends_with(".attention.query_key_value.bias"))
    return;
  const int64_t rows = 3 * c.channels, row = name.ends_with(".weight") ? c.channels : 1;
  const std::vector<float> given(values, values + rows * row);
  for (int64_t hf = 0; hf < rows; ++hf) {
    const int64_t ours = our_qkv_row(c, hf);
    const float* from = given.data() + (to_hf ? ours : hf) * row;
    std::copy(from, from + row, values + (to_hf ? hf : ours) * row);
  }
}

// The buffers older GPT-NeoX checkpoints store beside the weights (the causal mask, its fill value, RoPE's
// inverse frequencies): not parameters.
bool is_attention_buffer(const std::string& name) {
  return name.ends_with(".attention.bias") || name.ends_with(".attention.masked_bias") ||
         name.ends_with(".rotary_emb.inv_freq");
}

json hf_gpt_neox_config_json(const ModelConfig& c) {
  return {{"architectures", {"GPTNeoXForCausalLM"}},
          {"model_type", "gpt_neox"},
          {"hidden_size", c.channels},
          {"num_attention_heads", c.num_heads},
          {"num_hidden_layers", c.num_layers},
          {"intermediate_size", c.hidden()},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_seq_len},
          {"rotary_pct", partial_rotary_factor(c.rotary_dim(), c.head_size())},
          {"rotary_emb_base", json_float(c.rope.theta)},
          {"rope_theta", json_float(c.rope.theta)},
          {"rope_scaling", nullptr},
          {"layer_norm_eps", json_float(c.norm_eps)},
          {"use_parallel_residual", c.parallel_residual},
          {"hidden_act", c.mlp == MlpKind::gelu_exact ? "gelu" : "gelu_fast"},
          {"attention_bias", true},
          {"attention_dropout", 0.0},
          {"hidden_dropout", 0.0},
          {"initializer_range", 0.02},
          {"tie_word_embeddings", c.tied_embeddings},
          {"use_cache", true}};
}

}  // namespace

ModelConfig hf_gpt_neox_config(const json& config, const std::filesystem::path& path) {
  const HfConfigReader r(config, path);
  r.expect("model_type", "gpt_neox", "this reader is GPT-NeoX's");
  r.expect("attention_bias", true, "Tessera's GPT-NeoX has biases on its attention's projections");
  r.expect("rope_scaling", json(), "Tessera's GPT-NeoX does not scale RoPE");
  ModelConfig c = llama_family_config(r);
  c.norm = NormKind::layernorm;
  c.bias = true;
  // Pythia's "gelu" is the exact form; GPT-NeoX-20B's "gelu_fast" the tanh one (as gelu_new and gelu_pytorch_tanh).
  const json* act = r.find("hidden_act");
  const bool tanh_form = act && (*act == "gelu_fast" || *act == "gelu_new" || *act == "gelu_pytorch_tanh");
  TS_CHECK(!act || *act == "gelu" || tanh_form, r.where(), ": field 'hidden_act' is ", json_excerpt(*act),
           ", expected \"gelu\" (the exact GELU) or \"gelu_fast\" (its tanh form): Tessera's GPT-NeoX MLP is a GELU");
  c.mlp = tanh_form ? MlpKind::gelu : MlpKind::gelu_exact;
  c.num_kv_heads = c.num_heads;  // every head its own keys and values
  c.tied_embeddings = r.boolean("tie_word_embeddings", false);
  c.parallel_residual = r.boolean("use_parallel_residual", true);
  c.mlp_hidden = r.integer("intermediate_size");
  c.max_seq_len = r.integer("max_position_embeddings", 2048);
  c.norm_eps = r.number("layer_norm_eps", 1e-5f);
  // Pythia's configs name RoPE's base rotary_emb_base, later transformers rope_theta; rotary_pct is
  // transformers 5's partial_rotary_factor.
  c.rope.theta = r.number("rope_theta", r.number("rotary_emb_base", 1e4f));
  try {
    TS_CHECK(c.channels % c.num_heads == 0, "hidden_size (", c.channels, ") must be a multiple of ",
             "num_attention_heads (", c.num_heads, ")");
    const char* factor = r.find("partial_rotary_factor") ? "partial_rotary_factor" : "rotary_pct";
    c.rotary_dims = read_rotary_dims(r, factor, 0.25f, c.head_size());
    c.validate();
  } catch (const Error& e) {
    TS_FAIL(r.where(), ": ", e.what());
  }
  return c;
}

bool has_hf_gpt_neox_form(const ModelConfig& c) {
  const RopeConfig plain{.theta = c.rope.theta};
  // The exact GELU is GPT-NeoX's alone; its tanh form with sequential blocks is StarCoder2's computation.
  const bool gelu = c.mlp == MlpKind::gelu_exact || (c.mlp == MlpKind::gelu && c.parallel_residual);
  return c.naming == Naming::llama && c.norm == NormKind::layernorm && c.bias && gelu &&
         c.positions == PositionKind::rope && c.rope == plain && c.kv_heads() == c.num_heads && c.head_dim == 0 &&
         c.norm_placement == NormPlacement::pre && !c.qkv_bias && !c.qk_norm && !c.phi3 && !c.moe.enabled() &&
         !c.mla.enabled() && c.attention_window == 0 && c.nope_layers.empty() && c.attention_scalar == 0 &&
         !c.scaled_embeddings && c.attention_softcap == 0 && c.logit_softcap == 0 && !c.shared_norm && !c.head_bias &&
         c.logit_scale == 0;
}

HfSource open_hf_gpt_neox(const std::filesystem::path& dir, const ModelConfig& config) {
  config.validate();
  TS_CHECK(has_hf_gpt_neox_form(config), "open_hf_gpt_neox: a ", model_family(config), " model is not GPT-NeoX's");
  const auto skipped = [&config](const std::string& name) {
    return is_attention_buffer(name) || (name == "embed_out.weight" && config.tied_embeddings);
  };
  return checked_hf_source(dir, hf_gpt_neox_pieces(config), skipped,
                           "a gpt-neox with " + std::to_string(config.num_layers) + " layers",
                           [config](const std::string& name, float* values) {
                             reorder_qkv_rows(config, name, values, false);
                           });
}

void save_hf_gpt_neox(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                      int64_t max_shard_bytes, const HfTokenIds& ids, HfWeightType type) {
  config.validate();
  TS_CHECK(has_hf_gpt_neox_form(config), "save_hf_gpt_neox: a ", model_family(config), " model has no ",
           "GPTNeoXForCausalLM form");
  TS_CHECK(!type.fp8.enabled(), "GPT-NeoX has no fine-grained FP8 form in transformers: export it in bf16 or fp16");
  const HfTensorEdit to_hf = [&config](const std::string& name, float* out, int64_t) {
    reorder_qkv_rows(config, name, out, true);
  };
  write_hf_folder(dir, config, hf_gpt_neox_pieces(config), values, to_hf, hf_gpt_neox_config_json(config),
                  max_shard_bytes, ids, type, "save_hf_gpt_neox");
}

}  // namespace tessera
