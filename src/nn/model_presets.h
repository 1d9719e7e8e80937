// The named models of --model: GPT-2 (OpenAI's sizes), Llama 3.x (the published shapes), Mixtral and
// a DeepSeek-style fine-grained MoE, plus tiny sizes for tests and mini sizes for the CPU demo.
#pragma once

#include <string>
#include <vector>

#include "nn/model_config.h"

namespace tessera {

// Throws tessera::Error listing the known names when `name` is not one of them.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace tessera
