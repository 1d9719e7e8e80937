// Reading state.json: nlohmann's exceptions never escape; a missing or mistyped field is reported
// with the key and (shortened, escaped) value.
#include "checkpoint/checkpoint_state.h"

#include <cmath>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/model_config_json.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"
#include "data/whole_file.h"

namespace tessera {
namespace fs = std::filesystem;
namespace {

std::string state_path(const fs::path& checkpoint) { return quoted_text((checkpoint / "state.json").string()); }

const nlohmann::json& field(const nlohmann::json& object, const char* key, const fs::path& checkpoint,
                            const std::string& within = "") {
  auto it = object.find(key);
  TS_CHECK(it != object.end(), "checkpoint ", state_path(checkpoint), ": missing '", within, key,
           "'; the file is damaged or not a Tessera checkpoint state");
  return *it;
}

bool is_non_negative_integer(const nlohmann::json& v) {
  return v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX)
                                : v.is_number_integer() && v.get<int64_t>() >= 0;
}

}  // namespace

nlohmann::json read_state_json(const fs::path& checkpoint) {
  const fs::path path = checkpoint / "state.json";
  nlohmann::json j = nlohmann::json::parse(read_whole_file(path, "checkpoint state", kMaxConfigFileBytes), nullptr,
                                           false);
  TS_CHECK(!j.is_discarded() && j.is_object(), "checkpoint ", quoted_text(path.string()),
           ": not a JSON object; the file is damaged");
  return j;
}

int64_t state_count(const nlohmann::json& state, const char* key, const fs::path& checkpoint) {
  const nlohmann::json& v = field(state, key, checkpoint);
  TS_CHECK(is_non_negative_integer(v), "checkpoint ", state_path(checkpoint), ": '", key,
           "' must be a non-negative integer, got ", json_excerpt(v));
  return v.get<int64_t>();
}

uint64_t state_seed(const nlohmann::json& state, const fs::path& checkpoint) {
  const nlohmann::json& v = field(state, "seed", checkpoint);
  TS_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), "checkpoint ",
           state_path(checkpoint), ": 'seed' must be a non-negative integer, got ", json_excerpt(v));
  return v.get<uint64_t>();
}

double state_loss_scale(const nlohmann::json& state, const fs::path& checkpoint) {
  if (!state.contains("loss_scale")) return 0.0;
  const nlohmann::json& v = state["loss_scale"];
  TS_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 1.0, "checkpoint ",
           state_path(checkpoint), ": 'loss_scale' must be a finite number >= 1, got ", json_excerpt(v));
  return v.get<double>();
}

std::vector<float> state_fp8_amax_history(const nlohmann::json& state, const fs::path& checkpoint) {
  std::vector<float> history;
  if (!state.contains("fp8_amax_history")) return history;
  const nlohmann::json& v = state["fp8_amax_history"];
  TS_CHECK(v.is_array(), "checkpoint ", state_path(checkpoint), ": 'fp8_amax_history' must be an array of numbers, got ",
           json_excerpt(v));
  for (const nlohmann::json& a : v) {
    TS_CHECK(a.is_number(), "checkpoint ", state_path(checkpoint), ": 'fp8_amax_history' holds ", json_excerpt(a),
             ", not a number");
    history.push_back(a.get<float>());
  }
  return history;
}

ModelConfig state_model_config(const nlohmann::json& state, const fs::path& checkpoint) {
  return model_config_from_json(field(state, "model", checkpoint), "checkpoint " + state_path(checkpoint));
}

std::map<std::string, FileDigest> state_files(const nlohmann::json& state, const fs::path& checkpoint) {
  std::map<std::string, FileDigest> files;
  auto it = state.find("files");
  if (it == state.end()) return files;
  TS_CHECK(it->is_object(), "checkpoint ", state_path(checkpoint), ": 'files' must be an object");
  for (const auto& [name, entry] : it->items()) {
    TS_CHECK(name == kModelFile || name == kOptimizerFile || name == kTokenizerFile || is_shard_file_name(name),
             "checkpoint ",
             state_path(checkpoint), ": 'files' names ", quoted_text(name, 60), ", which is not a checkpoint file");
    const nlohmann::json* bytes = entry.is_object() && entry.contains("bytes") ? &entry["bytes"] : nullptr;
    const nlohmann::json* crc = entry.is_object() && entry.contains("crc32") ? &entry["crc32"] : nullptr;
    uint32_t crc_value = 0;
    const bool valid = bytes && is_non_negative_integer(*bytes) && crc && crc->is_string() &&
                       parse_crc32_hex(crc->get_ref<const std::string&>(), crc_value);
    TS_CHECK(valid, "checkpoint ", state_path(checkpoint), ": 'files.", name,
             "' must be {\"bytes\": <size>, \"crc32\": \"<8 hex digits>\"}, got ", json_excerpt(entry));
    files[name] = FileDigest{bytes->get<uint64_t>(), crc->get<std::string>()};
  }
  return files;
}

nlohmann::json files_json(const std::map<std::string, FileDigest>& files) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, digest] : files) j[name] = {{"bytes", digest.bytes}, {"crc32", digest.crc32}};
  return j;
}

}  // namespace tessera
