// state.json of a training checkpoint, read field by field: every count is a non-negative integer,
// the model shape positive integers, the file table names only the checkpoint's own files (shard
// files included) with a size and an 8-hex-digit CRC-32. Each error is one line naming state.json, the key and the value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/file_checksum.h"
#include "nn/model_config.h"

namespace tessera {

// The files a checkpoint may hold besides state.json and its shard files (checkpoint_index.h).
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";  // the first format's moments
inline constexpr const char* kTokenizerFile = "tokenizer.json";

// checkpoint/state.json parsed (a bounded regular file holding a JSON object).
nlohmann::json read_state_json(const std::filesystem::path& checkpoint);

// state[key] as a non-negative integer.
int64_t state_count(const nlohmann::json& state, const char* key, const std::filesystem::path& checkpoint);
uint64_t state_seed(const nlohmann::json& state, const std::filesystem::path& checkpoint);
// fp16's dynamic loss scale: a finite number >= 1, or 0 when the run did not scale (key absent).
double state_loss_scale(const nlohmann::json& state, const std::filesystem::path& checkpoint);
// The fp8 scales' amax history: an array of numbers, empty when the run had no fp8 (key absent).
std::vector<float> state_fp8_amax_history(const nlohmann::json& state, const std::filesystem::path& checkpoint);
ModelConfig state_model_config(const nlohmann::json& state, const std::filesystem::path& checkpoint);
// The recorded size and CRC-32 of each file; empty for a checkpoint written before they were recorded.
std::map<std::string, FileDigest> state_files(const nlohmann::json& state, const std::filesystem::path& checkpoint);

nlohmann::json files_json(const std::map<std::string, FileDigest>& files);

}  // namespace tessera
