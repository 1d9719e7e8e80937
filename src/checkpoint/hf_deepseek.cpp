// DeepSeek-V3's and V2's config.json both ways and their RoPE channel order (hf_deepseek.h).
#include "checkpoint/hf_deepseek.h"

#include <algorithm>

#include "checkpoint/hf_config_reader.h"
#include "checkpoint/hf_rope_rows.h"
#include "core/error.h"
#include "data/json_excerpt.h"

namespace tessera {
namespace {

using nlohmann::json;

// The rows of `name` that hold rotated tails, as (first row, rows) runs of R rows each, and the
// tensor's columns; none for any other tensor.
struct TailRows {
  std::vector<int64_t> firsts;
  int64_t cols = 0;
};
TailRows tail_rows(const ModelConfig& c, const std::string& name, int64_t numel) {
  TailRows t;
  if (!c.mla.enabled()) return t;
  const int64_t HS = c.head_size(), rows_q = c.num_heads * HS;
  if (name.ends_with(".self_attn.q_proj.weight") || name.ends_with(".self_attn.q_b_proj.weight")) {
    for (int64_t h = 0; h < c.num_heads; ++h) t.firsts.push_back(h * HS + c.mla.nope_dim);
    t.cols = numel / rows_q;
  } else if (name.ends_with(".self_attn.kv_a_proj_with_mqa.weight")) {
    t.firsts.push_back(c.mla.kv_rank);
    t.cols = numel / (c.mla.kv_rank + c.mla.rope_dim);
  }
  return t;
}

// The tails of `name` (numel values) between the two orders: to interleaved (export) or from it.
void reorder_tails(const ModelConfig& config, const std::string& name, float* values, int64_t numel,
                   bool to_interleaved) {
  const TailRows t = tail_rows(config, name, numel);
  for (const int64_t first : t.firsts)
    reorder_rope_pairs(values + first * t.cols, config.mla.rope_dim, t.cols, to_interleaved);
}

}  // namespace

bool is_hf_deepseek_type(const json& model_type) { return model_type == "deepseek_v3" || model_type == "deepseek_v2"; }

ModelConfig hf_deepseek_config(const json& config, const std::filesystem::path& path) {
  const HfConfigReader r(config, path);
  const json* type = r.find("model_type");
  TS_CHECK(type && is_hf_deepseek_type(*type), r.where(), ": expected model_type \"deepseek_v3\" or \"deepseek_v2\"");
  const bool v3 = *type == "deepseek_v3";
  r.expect("hidden_act", "silu", "DeepSeek's MLPs and experts are SwiGLU (silu)");
  r.expect("attention_bias", false, "Tessera's latent attention has no biases");
  if (v3) {
    r.expect("scoring_func", "sigmoid", "Tessera's DeepSeek-V3 router scores by sigmoid");
    r.expect("topk_method", "noaux_tc", "Tessera picks the top-k by score plus the balancing bias");
  } else {
    r.expect("scoring_func", "softmax", "Tessera's DeepSeek-V2 router scores by softmax");
    if (const json* method = r.find("topk_method"))
      TS_CHECK(*method == "greedy" || *method == "group_limited_greedy", r.where(), ": field 'topk_method' is ",
               json_excerpt(*method), ", expected \"greedy\" or \"group_limited_greedy\"");
  }
  r.expect("moe_layer_freq", 1, "every layer of Tessera's MoE models past the first dense ones is a MoE layer");
  r.expect("pretraining_tp", 1, "tensor-parallel pretraining slices are not emulated");

  ModelConfig c = llama_family_config(r);
  c.max_seq_len = r.integer("max_position_embeddings", 4096);
  TS_CHECK(r.integer("num_key_value_heads", c.num_heads) == c.num_heads, r.where(),
           ": field 'num_key_value_heads' must equal num_attention_heads (", c.num_heads,
           "): latent attention gives every head its own key and value");
  c.mlp_hidden = r.integer("intermediate_size");
  c.norm_eps = r.number("rms_norm_eps", 1e-6f);
  c.rope.theta = r.number("rope_theta", 1e4f);
  if (const json* scaling = r.find("rope_scaling")) read_rope_scaling(r, *scaling, c.max_seq_len, c.rope);
  c.tied_embeddings = r.boolean("tie_word_embeddings", false);
  c.mla.q_rank = r.count("q_lora_rank", 0);
  c.mla.kv_rank = r.integer("kv_lora_rank");
  c.mla.nope_dim = r.count("qk_nope_head_dim", 0);
  c.mla.rope_dim = r.integer("qk_rope_head_dim");
  c.mla.v_dim = r.integer("v_head_dim");
  read_deepseek_experts(r, c);
  // DeepSeek-V3 scales the routed output always, DeepSeek-V2 only when it does not renormalise.
  c.moe.renormalize = r.boolean("norm_topk_prob", v3);
  c.moe.routed_scale = v3 || !c.moe.renormalize ? r.number("routed_scaling_factor", 1.0f) : 1.0f;
  c.moe.router = v3 ? RouterKind::sigmoid_bias : RouterKind::softmax_topk;
  // An absent n_group and topk_group are transformers' DeepseekV3Config defaults (8 and 4); DeepSeek-V2's
  // greedy routing has none.
  c.moe.groups = r.integer("n_group", v3 ? 8 : 1);
  c.moe.kept_groups = r.integer("topk_group", v3 ? 4 : c.moe.groups);
  if (!v3 && (!r.find("topk_method") || *r.find("topk_method") == "greedy")) c.moe.groups = c.moe.kept_groups = 1;
  try {
    c.validate();
  } catch (const Error& e) {
    TS_FAIL(r.where(), ": ", e.what());
  }
  return c;
}

void read_deepseek_experts(const HfConfigReader& r, ModelConfig& c) {
  c.moe.num_experts = r.integer("n_routed_experts");
  c.moe.top_k = r.integer("num_experts_per_tok");
  c.moe.expert_hidden = r.integer("moe_intermediate_size");
  c.moe.num_shared_experts = r.count("n_shared_experts", 0);
  c.moe.first_dense_layers = r.count("first_k_dense_replace", 0);
}

HfDeepseekFiles hf_deepseek_files(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  const json config = read_hf_config_json(path);
  const HfConfigReader r(config, path);
  return {r.boolean("rope_interleave", true), r.count("num_nextn_predict_layers", 0)};
}

bool hf_deepseek_exportable(const ModelConfig& c) {
  if (!c.mla.enabled() || !c.moe.enabled()) return false;
  if (c.moe.router == RouterKind::sigmoid_bias) return true;  // DeepSeek-V3
  return !c.moe.renormalize || c.moe.routed_scale == 1.0f;    // DeepSeek-V2 scales only the unrenormalised
}

json hf_deepseek_config_json(const ModelConfig& c) {
  const bool v3 = c.moe.router == RouterKind::sigmoid_bias;
  json j = {{"architectures", json::array({v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"})},
            {"model_type", v3 ? "deepseek_v3" : "deepseek_v2"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.channels},
            {"intermediate_size", c.hidden()},
            {"moe_intermediate_size", c.moe.expert_hidden},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_heads},
            {"num_key_value_heads", c.num_heads},
            {"n_shared_experts", c.moe.num_shared_experts},
            {"n_routed_experts", c.moe.num_experts},
            {"routed_scaling_factor", json_float(c.moe.routed_scale)},
            {"kv_lora_rank", c.mla.kv_rank},
            {"q_lora_rank", c.mla.q_rank > 0 ? json(c.mla.q_rank) : json(nullptr)},
            {"qk_rope_head_dim", c.mla.rope_dim},
            {"v_head_dim", c.mla.v_dim},
            {"qk_nope_head_dim", c.mla.nope_dim},
            {"n_group", c.moe.groups},
            {"topk_group", c.moe.kept_groups},
            {"num_experts_per_tok", c.moe.top_k},
            {"first_k_dense_replace", c.moe.first_dense_layers},
            {"moe_layer_freq", 1},
            {"norm_topk_prob", c.moe.renormalize},
            {"scoring_func", v3 ? "sigmoid" : "softmax"},
            {"topk_method", v3 ? "noaux_tc" : c.moe.groups > 1 ? "group_limited_greedy" : "greedy"},
            {"hidden_act", "silu"},
            {"max_position_embeddings", c.max_seq_len},
            {"rms_norm_eps", json_float(c.norm_eps)},
            {"rope_theta", json_float(c.rope.theta)},
            {"rope_scaling", rope_scaling_json(c.rope)},
            {"attention_bias", false},
            {"tie_word_embeddings", c.tied_embeddings},
            {"initializer_range", 0.02}};
  if (v3) {
    j["head_dim"] = c.mla.rope_dim;  // transformers' rotary size
    j["rope_interleave"] = true;
    j["num_nextn_predict_layers"] = 0;
  }
  return j;
}

void deinterleave_rope_rows(const ModelConfig& config, const std::string& name, float* values, int64_t numel) {
  reorder_tails(config, name, values, numel, false);
}

void interleave_rope_rows(const ModelConfig& config, const std::string& name, float* values, int64_t numel) {
  reorder_tails(config, name, values, numel, true);
}

}  // namespace tessera
