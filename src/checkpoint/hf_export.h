// Writing a Hugging Face folder from a family's pieces (hf_source.h's HfPiece, none transposed): the weights
// one shard at a time, each tensor read from the whole model's values as its shard is written and changed
// into the family's order on the way, then config.json. What every Llama-form and GPT-NeoX export shares.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/hf_source.h"
#include "checkpoint/hf_token_ids.h"
#include "checkpoint/hf_weight_files.h"
#include "nn/model_config.h"
#include "nn/parameter_values.h"

namespace tessera {

// A family's change of one HF tensor on the way out (rows reordered, gains offset): `values` holds its n
// elements in our order, rewritten in the file's.
using HfTensorEdit = std::function<void(const std::string& hf_name, float* values, int64_t n)>;

// Writes dir (created if need be): the tensors `pieces` lay out, from `values` through `edit`, stored as `type`
// says in shards of at most `max_shard_bytes` (write_hf_weights); then `config_json` with torch_dtype, FP8's
// quantization_config and `ids` added, as config.json. `caller` names the errors.
void write_hf_folder(const std::filesystem::path& dir, const ModelConfig& config, const std::vector<HfPiece>& pieces,
                     const ParameterValues& values, const HfTensorEdit& edit, nlohmann::json config_json,
                     int64_t max_shard_bytes, const HfTokenIds& ids, HfWeightType type, const char* caller);

}  // namespace tessera
