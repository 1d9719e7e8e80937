// The decoder's config as the "model" object of a checkpoint's state.json, both ways. Keys an older
// checkpoint lacks (everything but the five GPT-2 shape fields) take GPT-2's values, so GPT-2
// checkpoints written before Llama and MoE existed still load.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "nn/model_config.h"

namespace tessera {

nlohmann::json model_config_to_json(const ModelConfig& config);
// `where` prefixes errors (e.g. "checkpoint 'run/ckpt-100/state.json'"); a wrong key type or value
// is named with the expected one. The result is validated.
ModelConfig model_config_from_json(const nlohmann::json& model, const std::string& where);

}  // namespace tessera
