// Hugging Face config.json fields, checked and named in errors (hf_config_reader.h).
#include "checkpoint/hf_config_reader.h"

#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"

namespace tessera {

using nlohmann::json;

HfConfigReader::HfConfigReader(const json& config, const std::filesystem::path& path)
    : config_(config), where_("Hugging Face config " + quoted_text(path.string())) {}

const json* HfConfigReader::find(const char* key) const {
  auto it = config_.find(key);
  return it == config_.end() || it->is_null() ? nullptr : &*it;
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

void read_llama3_rope_scaling(const HfConfigReader& r, const json& scaling, RopeConfig& rope) {
  TS_CHECK(scaling.is_object(), r.where(), ": field 'rope_scaling' must be an object or null, got ",
           json_excerpt(scaling));
  const json* type = scaling.contains("rope_type") ? &scaling["rope_type"] : scaling.contains("type") ? &scaling["type"]
                                                                                                    : nullptr;
  TS_CHECK(type && *type == "llama3", r.where(), ": rope_scaling type ", type ? json_excerpt(*type) : "(none)",
           " is not supported; expected \"llama3\" (Llama 3.1 frequency scaling) or no rope_scaling");
  auto get = [&](const char* key) {
    TS_CHECK(scaling.contains(key) && scaling[key].is_number() && scaling[key].get<double>() > 0, r.where(),
             ": rope_scaling needs a positive number '", key, "', got ",
             scaling.contains(key) ? json_excerpt(scaling[key]) : "nothing");
    return scaling[key].get<double>();
  };
  rope.factor = float(get("factor"));
  rope.low_freq_factor = float(get("low_freq_factor"));
  rope.high_freq_factor = float(get("high_freq_factor"));
  rope.original_max_positions = int64_t(get("original_max_position_embeddings"));
}

double json_float(float v) {
  char text[32];
  const char* end = std::to_chars(text, text + sizeof(text), v).ptr;
  double out = v;
  std::from_chars(text, end, out);
  return out;
}

}  // namespace tessera
