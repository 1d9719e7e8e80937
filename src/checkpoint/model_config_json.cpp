// ModelConfig <-> state.json's "model" object.
#include "checkpoint/model_config_json.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/json_excerpt.h"

namespace tessera {
namespace {

using nlohmann::json;

template <typename Enum>
using Names = std::vector<std::pair<Enum, const char*>>;

const Names<NormKind> kNorms = {{NormKind::layernorm, "layernorm"}, {NormKind::rmsnorm, "rmsnorm"}};
const Names<NormPlacement> kNormPlacements = {
    {NormPlacement::pre, "pre"}, {NormPlacement::post, "post"}, {NormPlacement::sandwich, "sandwich"}};
const Names<PositionKind> kPositions = {{PositionKind::learned, "learned"}, {PositionKind::rope, "rope"}};
const Names<MlpKind> kMlps = {
    {MlpKind::gelu, "gelu"}, {MlpKind::swiglu, "swiglu"}, {MlpKind::geglu, "geglu"}, {MlpKind::gelu_exact, "gelu-exact"}};
const Names<Naming> kNamings = {{Naming::gpt2, "gpt2"}, {Naming::llama, "llama"}};
const Names<RouterKind> kRouters = {{RouterKind::softmax_topk, "softmax_topk"},
                                    {RouterKind::sigmoid_bias, "sigmoid_bias"}};

template <typename Enum>
const char* name_of(const Names<Enum>& names, Enum value) {
  for (const auto& [v, name] : names)
    if (v == value) return name;
  return "?";
}

// Reads optional keys of one JSON object into a config, naming the key in every error.
class Reader {
 public:
  // Keys are named prefix + key (e.g. 'model.rope.theta') in errors that start with `where`.
  Reader(const json& object, std::string where, std::string prefix)
      : object_(object), where_(std::move(where)), prefix_(std::move(prefix)) {}

  void integer(const char* key, int64_t& out, int64_t min) {
    const json* v = find(key);
    if (!v) return;
    TS_CHECK(v->is_number_integer() && v->get<int64_t>() >= min, where_, ": '", prefix_, key, "' must be ",
             min == 1 ? std::string("a positive integer") : "an integer >= " + std::to_string(min), ", got ",
             json_excerpt(*v));
    out = v->get<int64_t>();
  }
  void number(const char* key, float& out) {
    const json* v = find(key);
    if (!v) return;
    TS_CHECK(v->is_number() && std::isfinite(v->get<double>()), where_, ": '", prefix_, key, "' must be a finite number, got ",
             json_excerpt(*v));
    out = v->get<float>();
  }
  void numbers(const char* key, std::vector<float>& out) {
    const json* v = find(key);
    if (!v) return;
    TS_CHECK(v->is_array() && std::all_of(v->begin(), v->end(), [](const json& x) { return x.is_number(); }), where_,
             ": '", prefix_, key, "' must be an array of numbers, got ", json_excerpt(*v));
    out = v->get<std::vector<float>>();
  }
  void integers(const char* key, std::vector<int64_t>& out) {
    const json* v = find(key);
    if (!v) return;
    TS_CHECK(v->is_array() && std::all_of(v->begin(), v->end(), [](const json& x) { return x.is_number_integer(); }),
             where_, ": '", prefix_, key, "' must be an array of integers, got ", json_excerpt(*v));
    out = v->get<std::vector<int64_t>>();
  }
  void boolean(const char* key, bool& out) {
    const json* v = find(key);
    if (!v) return;
    TS_CHECK(v->is_boolean(), where_, ": '", prefix_, key, "' must be true or false, got ", json_excerpt(*v));
    out = v->get<bool>();
  }
  template <typename Enum>
  void choice(const char* key, const Names<Enum>& names, Enum& out) {
    const json* v = find(key);
    if (!v) return;
    std::string known;
    for (const auto& [value, name] : names) {
      if (v->is_string() && v->get<std::string>() == name) {
        out = value;
        return;
      }
      known += (known.empty() ? "" : ", ") + std::string(name);
    }
    TS_FAIL(where_, ": '", prefix_, key, "' must be one of ", known, ", got ", json_excerpt(*v));
  }
  Reader object(const char* key) {
    const json* v = find(key);
    static const json empty = json::object();
    if (!v) return Reader(empty, where_, prefix_ + key + ".");
    TS_CHECK(v->is_object(), where_, ": '", prefix_, key, "' must be an object, got ", json_excerpt(*v));
    return Reader(*v, where_, prefix_ + key + ".");
  }

 private:
  const json* find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  const json& object_;
  std::string where_, prefix_;
};

}  // namespace

json model_config_to_json(const ModelConfig& c) {
  json j = {{"num_layers", c.num_layers},
            {"num_heads", c.num_heads},
            {"channels", c.channels},
            {"vocab_size", c.vocab_size},
            {"max_seq_len", c.max_seq_len},
            {"naming", name_of(kNamings, c.naming)},
            {"num_kv_heads", c.kv_heads()},
            {"mlp_hidden", c.hidden()},
            {"norm", name_of(kNorms, c.norm)},
            {"norm_eps", c.norm_eps},
            {"positions", name_of(kPositions, c.positions)},
            {"mlp", name_of(kMlps, c.mlp)},
            {"bias", c.bias},
            {"qkv_bias", c.qkv_bias},
            {"qk_norm", c.qk_norm},
            {"tied_embeddings", c.tied_embeddings}};
  if (c.head_dim > 0) j["head_dim"] = c.head_dim;
  if (c.phi3) j["phi3"] = true;
  if (c.norm_placement != NormPlacement::pre) j["norm_placement"] = name_of(kNormPlacements, c.norm_placement);
  if (c.parallel_residual) j["parallel_residual"] = true;
  if (c.shared_norm) j["shared_norm"] = true;
  if (c.logit_scale > 0) j["logit_scale"] = c.logit_scale;
  if (c.head_bias) j["head_bias"] = true;
  if (c.qk_norm_all_heads) j["qk_norm_all_heads"] = true;
  if (c.rotary_dims > 0) j["rotary_dims"] = c.rotary_dims;
  if (c.attention_window > 0) j["attention_window"] = c.attention_window;
  if (!c.nope_layers.empty()) j["nope_layers"] = c.nope_layers;
  if (!c.global_layers.empty()) j["global_layers"] = c.global_layers;
  if (c.local_rope_theta > 0) j["local_rope_theta"] = c.local_rope_theta;
  if (c.attention_scalar > 0) j["attention_scalar"] = c.attention_scalar;
  if (c.scaled_embeddings) j["scaled_embeddings"] = true;
  if (c.attention_softcap > 0) j["attention_softcap"] = c.attention_softcap;
  if (c.logit_softcap > 0) j["logit_softcap"] = c.logit_softcap;
  if (c.positions == PositionKind::rope)
    j["rope"] = {{"theta", c.rope.theta},
                 {"factor", c.rope.factor},
                 {"low_freq_factor", c.rope.low_freq_factor},
                 {"high_freq_factor", c.rope.high_freq_factor},
                 {"original_max_positions", c.rope.original_max_positions}};
  if (c.positions == PositionKind::rope && c.rope.yarn)
    j["rope"].update({{"yarn", true},
                      {"beta_fast", c.rope.beta_fast},
                      {"beta_slow", c.rope.beta_slow},
                      {"mscale", c.rope.mscale},
                      {"mscale_all_dim", c.rope.mscale_all_dim},
                      {"attention_factor", c.rope.attention_factor},
                      {"truncate", c.rope.truncate}});
  if (c.positions == PositionKind::rope && c.rope.linear) j["rope"]["linear"] = true;
  if (c.positions == PositionKind::rope && c.rope.longrope)
    j["rope"].update({{"longrope", true},
                      {"short_factor", c.rope.short_factor},
                      {"long_factor", c.rope.long_factor},
                      {"attention_factor", c.rope.attention_factor}});
  if (c.moe.enabled())
    j["moe"] = {{"num_experts", c.moe.num_experts},
                {"top_k", c.moe.top_k},
                {"expert_hidden", c.moe.expert_hidden},
                {"num_shared_experts", c.moe.num_shared_experts},
                {"router", name_of(kRouters, c.moe.router)},
                {"first_dense_layers", c.moe.first_dense_layers},
                {"routed_scale", c.moe.routed_scale},
                {"renormalize", c.moe.renormalize},
                {"groups", c.moe.groups},
                {"kept_groups", c.moe.kept_groups}};
  if (c.moe.shared_gate) j["moe"]["shared_gate"] = true;
  if (c.mla.enabled())
    j["latent_attention"] = {{"q_rank", c.mla.q_rank},
                             {"kv_rank", c.mla.kv_rank},
                             {"nope_dim", c.mla.nope_dim},
                             {"rope_dim", c.mla.rope_dim},
                             {"v_dim", c.mla.v_dim}};
  return j;
}

ModelConfig model_config_from_json(const json& model, const std::string& where) {
  TS_CHECK(model.is_object(), where, ": 'model' must be an object, got ", json_excerpt(model));
  for (const char* key : {"num_layers", "num_heads", "channels", "vocab_size", "max_seq_len"})
    TS_CHECK(model.contains(key), where, ": missing 'model.", key,
             "'; the file is damaged or not a Tessera checkpoint state");
  ModelConfig c;
  Reader r(model, where, "model.");
  r.integer("num_layers", c.num_layers, 1);
  r.integer("num_heads", c.num_heads, 1);
  r.integer("channels", c.channels, 1);
  r.integer("vocab_size", c.vocab_size, 1);
  r.integer("max_seq_len", c.max_seq_len, 1);
  r.choice("naming", kNamings, c.naming);
  r.integer("num_kv_heads", c.num_kv_heads, 0);
  r.integer("mlp_hidden", c.mlp_hidden, 0);
  r.choice("norm", kNorms, c.norm);
  r.number("norm_eps", c.norm_eps);
  r.choice("positions", kPositions, c.positions);
  r.choice("mlp", kMlps, c.mlp);
  r.boolean("bias", c.bias);
  r.boolean("qkv_bias", c.qkv_bias);  // absent before Qwen2 support: false
  r.boolean("qk_norm", c.qk_norm);    // absent before Qwen3 support: false
  r.boolean("phi3", c.phi3);          // absent before Phi-3 support: false
  r.choice("norm_placement", kNormPlacements, c.norm_placement);  // absent unless not "pre" (OLMo 2)
  r.boolean("qk_norm_all_heads", c.qk_norm_all_heads);          // absent unless set (OLMo 2)
  r.boolean("parallel_residual", c.parallel_residual);          // absent unless GPT-NeoX's
  r.boolean("shared_norm", c.shared_norm);                      // absent unless Cohere's
  r.number("logit_scale", c.logit_scale);                       // absent unless Cohere's
  r.boolean("head_bias", c.head_bias);                          // absent unless Phi-2's
  r.integer("head_dim", c.head_dim, 0);  // absent unless heads are not channels / num_heads wide
  r.integer("rotary_dims", c.rotary_dims, 0);  // absent unless a head rotates only some channels
  r.integer("attention_window", c.attention_window, 0);  // absent unless the model has a sliding window
  r.integers("nope_layers", c.nope_layers);              // absent unless some blocks take no RoPE
  r.integers("global_layers", c.global_layers);          // absent unless some blocks of a windowed model don't slide
  r.number("local_rope_theta", c.local_rope_theta);      // absent unless the sliding blocks have their own base
  r.number("attention_scalar", c.attention_scalar);      // absent unless not the head size
  r.boolean("scaled_embeddings", c.scaled_embeddings);   // absent unless Gemma's
  r.number("attention_softcap", c.attention_softcap);    // absent unless Gemma 2's
  r.number("logit_softcap", c.logit_softcap);            // absent unless Gemma 2's
  r.boolean("tied_embeddings", c.tied_embeddings);
  Reader rope = r.object("rope");
  rope.number("theta", c.rope.theta);
  rope.number("factor", c.rope.factor);
  rope.number("low_freq_factor", c.rope.low_freq_factor);
  rope.number("high_freq_factor", c.rope.high_freq_factor);
  rope.integer("original_max_positions", c.rope.original_max_positions, 1);
  rope.boolean("yarn", c.rope.yarn);  // absent before YaRN support: false
  rope.number("beta_fast", c.rope.beta_fast);
  rope.number("beta_slow", c.rope.beta_slow);
  rope.number("mscale", c.rope.mscale);
  rope.number("mscale_all_dim", c.rope.mscale_all_dim);
  rope.number("attention_factor", c.rope.attention_factor);
  rope.boolean("truncate", c.rope.truncate);
  rope.boolean("longrope", c.rope.longrope);  // absent before LongRoPE support: false
  rope.boolean("linear", c.rope.linear);      // absent unless linear scaling
  rope.numbers("short_factor", c.rope.short_factor);
  rope.numbers("long_factor", c.rope.long_factor);
  Reader moe = r.object("moe");
  moe.integer("num_experts", c.moe.num_experts, 0);
  moe.integer("top_k", c.moe.top_k, 1);
  moe.integer("expert_hidden", c.moe.expert_hidden, 0);
  moe.integer("num_shared_experts", c.moe.num_shared_experts, 0);
  moe.boolean("shared_gate", c.moe.shared_gate);  // absent before Qwen2-MoE support: false
  moe.choice("router", kRouters, c.moe.router);
  moe.integer("first_dense_layers", c.moe.first_dense_layers, 0);
  moe.number("routed_scale", c.moe.routed_scale);  // absent before DeepSeek-V3 support: 1
  moe.boolean("renormalize", c.moe.renormalize);    // absent before DeepSeek-V2 support: true
  moe.integer("groups", c.moe.groups, 1);           // absent before group-limited routing: 1
  moe.integer("kept_groups", c.moe.kept_groups, 1);
  Reader mla = r.object("latent_attention");      // absent before latent attention: none
  mla.integer("q_rank", c.mla.q_rank, 0);
  mla.integer("kv_rank", c.mla.kv_rank, 1);
  mla.integer("nope_dim", c.mla.nope_dim, 0);
  mla.integer("rope_dim", c.mla.rope_dim, 1);
  mla.integer("v_dim", c.mla.v_dim, 1);
  try {
    c.validate();
  } catch (const Error& e) {
    TS_FAIL(where, ": ", e.what(), "; the file is damaged");
  }
  return c;
}

}  // namespace tessera
