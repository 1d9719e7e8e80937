// Hugging Face config.json fields, checked and named in errors (hf_config_reader.h).
#include "checkpoint/hf_config_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"
#include "data/whole_file.h"

namespace tessera {

using nlohmann::json;

namespace {

// transformers 5 writes a model's RoPE as one dict, rope_parameters ({"rope_type": "llama3", "rope_theta":
// 500000.0, "factor": 32.0, ...}), where older files have top-level rope_theta (and partial_rotary_factor,
// and Phi-3's original_max_position_embeddings) beside a rope_scaling dict. Folds it into that older form,
// which every reader here reads; a value given both ways must agree. A dict per layer type (Gemma 3's
// local and global layers) is refused: Tessera's models turn every layer alike.
void fold_rope_parameters(json& config, const std::string& where) {
  const auto it = config.find("rope_parameters");
  if (it == config.end() || it->is_null()) return;
  const json rope = *it;
  TS_CHECK(rope.is_object(), where, ": field 'rope_parameters' must be an object or null, got ", json_excerpt(rope));
  // Gemma 3's two kinds of layer: the full-attention layers' RoPE is the model's, the sliding layers'
  // base its older rope_local_base_freq (their RoPE is unscaled).
  if (rope.contains("full_attention") && rope.contains("sliding_attention") && rope.size() == 2 &&
      rope["full_attention"].is_object() && rope["sliding_attention"].is_object()) {
    if (rope["sliding_attention"].contains("rope_theta") && !config.contains("rope_local_base_freq"))
      config["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"];
    config["rope_parameters"] = rope["full_attention"];
    return fold_rope_parameters(config, where);
  }
  for (const auto& [key, value] : rope.items())
    TS_CHECK(!value.is_object(), where, ": rope_parameters gives layers of type '", key,
             "' a RoPE of their own; Tessera turns every layer alike, so such a model is not supported");
  const json type = rope.contains("rope_type") ? rope["rope_type"] : rope.value("type", json("default"));
  std::vector<std::string> top_level = {"rope_theta", "partial_rotary_factor"};
  if (type == "longrope") top_level.push_back("original_max_position_embeddings");  // Phi-3 reads it there
  json scaling = rope;
  for (const std::string& key : top_level) {
    scaling.erase(key);
    if (!rope.contains(key)) continue;
    const auto given = config.find(key);
    TS_CHECK(given == config.end() || given->is_null() || *given == rope[key], where, ": field '", key, "' is ",
             given == config.end() ? "" : json_excerpt(*given), " but rope_parameters' is ", json_excerpt(rope[key]),
             "; keep one");
    config[key] = rope[key];
  }
  if (type == "default") return;
  const auto given = config.find("rope_scaling");
  TS_CHECK(given == config.end() || given->is_null() || *given == scaling, where,
           ": fields 'rope_scaling' and 'rope_parameters' both scale RoPE, differently; keep one");
  config["rope_scaling"] = scaling;
}

// Gemma 3 4B-27B (Gemma3ForConditionalGeneration, model_type "gemma3") keep their text model's config in
// text_config (a gemma3_text config, tied unless the outer config says otherwise); that model is what
// Tessera trains.
json gemma3_text_config(const json& config, const std::string& where) {
  const auto text = config.find("text_config");
  TS_CHECK(text != config.end() && text->is_object(), where,
           ": a \"gemma3\" config needs the \"text_config\" object of its text model");
  json c = *text;
  const json type = c.value("model_type", json("gemma3_text"));
  TS_CHECK(type == "gemma3_text", where, ": text_config's field 'model_type' is ", json_excerpt(type),
           ", expected \"gemma3_text\"");
  c["model_type"] = "gemma3_text";
  if (!c.contains("tie_word_embeddings") && config.contains("tie_word_embeddings"))
    c["tie_word_embeddings"] = config["tie_word_embeddings"];
  return c;
}

}  // namespace

json read_hf_config_json(const std::filesystem::path& path) {
  json config;
  try {
    config = json::parse(read_whole_file(path, "Hugging Face config", kMaxConfigFileBytes));
  } catch (const json::exception& e) {
    TS_FAIL("Hugging Face config ", quoted_text(path.string()), ": not valid JSON (", json_error_text(e), ")");
  }
  TS_CHECK(config.is_object(), "Hugging Face config ", quoted_text(path.string()), ": expected a JSON object");
  if (config.value("model_type", json()) == "gemma3")
    config = gemma3_text_config(config, "Hugging Face config " + quoted_text(path.string()));
  fold_rope_parameters(config, "Hugging Face config " + quoted_text(path.string()));
  return config;
}

HfConfigReader::HfConfigReader(const json& config, const std::filesystem::path& path)
    : config_(config), where_("Hugging Face config " + quoted_text(path.string())) {}

const json* HfConfigReader::find(const char* key) const {
  auto it = config_.find(key);
  return it == config_.end() || it->is_null() ? nullptr : &*it;
}

float HfConfigReader::number_or_null(const char* key, float fallback) const {
  auto it = config_.find(key);
  if (it != config_.end() && it->is_null()) return 0.0f;
  return number(key, fallback);
}

int64_t HfConfigReader::integer(const char* key, int64_t fallback) const {
  const json* v = find(key);
  TS_CHECK(v || fallback >= 0, where_, ": missing field '", key, "'");
  if (!v) return fallback;
  TS_CHECK(v->is_number_integer() && v->get<int64_t>() > 0, where_, ": field '", key,
           "' must be a positive integer, got ", json_excerpt(*v));
  return v->get<int64_t>();
}

int64_t HfConfigReader::count(const char* key, int64_t fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  TS_CHECK(v->is_number_integer() && v->get<int64_t>() >= 0, where_, ": field '", key,
           "' must be an integer >= 0, got ", json_excerpt(*v));
  return v->get<int64_t>();
}

float HfConfigReader::number(const char* key, float fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  TS_CHECK(v->is_number() && std::isfinite(v->get<double>()) && v->get<double>() > 0, where_, ": field '", key,
           "' must be a positive number, got ", json_excerpt(*v));
  return v->get<float>();
}

bool HfConfigReader::boolean(const char* key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  TS_CHECK(v->is_boolean(), where_, ": field '", key, "' must be true or false, got ", json_excerpt(*v));
  return v->get<bool>();
}

void HfConfigReader::expect(const char* key, const json& expected, const char* why) const {
  const json* v = find(key);
  TS_CHECK(!v || *v == expected, where_, ": field '", key, "' is ", json_excerpt(*v), ", expected ", expected.dump(),
           "; ", why);
}

int64_t read_rotary_dims(const HfConfigReader& r, const char* key, float fallback, int64_t head_size) {
  const double partial = r.number(key, fallback);
  const int64_t rotated = int64_t(double(head_size) * partial);
  TS_CHECK(partial <= 1.0 && rotated >= 2 && rotated % 2 == 0, r.where(), ": field '", key, "' (", partial,
           ") must rotate an even number of a head's ", head_size, " channels, not ", rotated);
  return rotated < head_size ? rotated : 0;
}

double partial_rotary_factor(int64_t rotated, int64_t head_size) {
  double factor = double(rotated) / double(head_size);
  while (int64_t(double(head_size) * factor) < rotated) factor = std::nextafter(factor, 2.0);
  return factor;
}

ModelConfig llama_family_config(const HfConfigReader& r) {
  ModelConfig c;
  c.naming = Naming::llama;
  c.norm = NormKind::rmsnorm;
  c.positions = PositionKind::rope;
  c.mlp = MlpKind::swiglu;
  c.bias = false;
  c.num_layers = r.integer("num_hidden_layers");
  c.num_heads = r.integer("num_attention_heads");
  c.channels = r.integer("hidden_size");
  c.vocab_size = r.integer("vocab_size");
  return c;
}

void read_rope_scaling(const HfConfigReader& r, const json& scaling, int64_t max_positions, RopeConfig& rope) {
  TS_CHECK(scaling.is_object(), r.where(), ": field 'rope_scaling' must be an object or null, got ",
           json_excerpt(scaling));
  const json* type = scaling.contains("rope_type") ? &scaling["rope_type"] : scaling.contains("type") ? &scaling["type"]
                                                                                                    : nullptr;
  TS_CHECK(type && (*type == "llama3" || *type == "yarn" || *type == "longrope" || *type == "linear"), r.where(),
           ": rope_scaling type ", type ? json_excerpt(*type) : "(none)", " is not supported; expected \"llama3\" ",
           "(Llama 3.1 frequency scaling), \"yarn\", \"longrope\" (Phi-3's), \"linear\" or no rope_scaling");
  // A number of the dict: positive, or absent (`fallback`, < 0: required) or, with `zero_ok`, 0.
  auto get = [&](const char* key, double fallback = -1.0, bool zero_ok = false) {
    if ((!scaling.contains(key) || scaling[key].is_null()) && fallback >= 0) return fallback;
    TS_CHECK(scaling.contains(key) && scaling[key].is_number() &&
                 (scaling[key].get<double>() > 0 || (zero_ok && scaling[key].get<double>() == 0)),
             r.where(), ": rope_scaling needs a positive number '", key, "', got ",
             scaling.contains(key) ? json_excerpt(scaling[key]) : "nothing");
    return scaling[key].get<double>();
  };
  if (*type == "longrope") {  // Phi-3's: the factors per frequency; the lengths from the config's top level
    const auto factors = [&](const char* key) {
      const json* f = scaling.contains(key) ? &scaling[key] : nullptr;
      const auto positive = [](const json& x) { return x.is_number() && x.get<double>() > 0; };
      TS_CHECK(f && f->is_array() && !f->empty() && std::all_of(f->begin(), f->end(), positive),
               r.where(), ": longrope rope_scaling needs '", key, "', an array of positive numbers, got ",
               f ? json_excerpt(*f) : "nothing");
      return f->get<std::vector<float>>();
    };
    rope.longrope = true;
    rope.short_factor = factors("short_factor");
    rope.long_factor = factors("long_factor");
    rope.original_max_positions = r.integer("original_max_position_embeddings");
    rope.factor = float(double(max_positions) / double(rope.original_max_positions));
    rope.attention_factor = float(get("attention_factor", 0.0));
    return;
  }
  rope.factor = float(get("factor"));
  if (*type == "linear") {  // every frequency divided by the factor
    TS_CHECK(rope.factor >= 1.0f, r.where(), ": rope_scaling's linear factor must be at least 1, got ", rope.factor);
    rope.linear = true;
    return;
  }
  if (*type == "llama3") {
    rope.low_freq_factor = float(get("low_freq_factor"));
    rope.high_freq_factor = float(get("high_freq_factor"));
    rope.original_max_positions = int64_t(get("original_max_position_embeddings"));
    return;
  }
  rope.yarn = true;
  rope.original_max_positions = int64_t(get("original_max_position_embeddings", double(max_positions)));
  rope.beta_fast = float(get("beta_fast", 32.0));
  rope.beta_slow = float(get("beta_slow", 1.0));
  rope.mscale = float(get("mscale", 0.0, true));
  rope.mscale_all_dim = float(get("mscale_all_dim", 0.0, true));
  rope.attention_factor = float(get("attention_factor", 0.0));
  if (scaling.contains("truncate")) {
    TS_CHECK(scaling["truncate"].is_boolean(), r.where(), ": rope_scaling's 'truncate' must be true or false, got ",
             json_excerpt(scaling["truncate"]));
    rope.truncate = scaling["truncate"].get<bool>();
  }
  TS_CHECK(rope.factor >= 1.0f, r.where(), ": rope_scaling's yarn factor must be at least 1, got ", rope.factor);
}

json rope_scaling_json(const RopeConfig& rope) {
  if (rope.longrope) {
    json j = {{"type", "longrope"}, {"short_factor", json::array()}, {"long_factor", json::array()}};
    for (float f : rope.short_factor) j["short_factor"].push_back(json_float(f));
    for (float f : rope.long_factor) j["long_factor"].push_back(json_float(f));
    if (rope.attention_factor > 0) j["attention_factor"] = json_float(rope.attention_factor);
    return j;
  }
  if (rope.factor == 0) return nullptr;
  if (rope.linear) return {{"rope_type", "linear"}, {"factor", json_float(rope.factor)}};
  if (!rope.yarn)
    return {{"rope_type", "llama3"},
            {"factor", json_float(rope.factor)},
            {"low_freq_factor", json_float(rope.low_freq_factor)},
            {"high_freq_factor", json_float(rope.high_freq_factor)},
            {"original_max_position_embeddings", rope.original_max_positions}};
  json j = {{"rope_type", "yarn"},
            {"factor", json_float(rope.factor)},
            {"original_max_position_embeddings", rope.original_max_positions},
            {"beta_fast", json_float(rope.beta_fast)},
            {"beta_slow", json_float(rope.beta_slow)}};
  if (rope.mscale > 0) j["mscale"] = json_float(rope.mscale);
  if (rope.mscale_all_dim > 0) j["mscale_all_dim"] = json_float(rope.mscale_all_dim);
  if (rope.attention_factor > 0) j["attention_factor"] = json_float(rope.attention_factor);
  if (!rope.truncate) j["truncate"] = false;
  return j;
}

double json_float(float v) {
  char text[32];
  const char* end = std::to_chars(text, text + sizeof(text), v).ptr;
  double out = v;
  std::from_chars(text, end, out);
  return out;
}

}  // namespace tessera
