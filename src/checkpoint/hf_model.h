// Hugging Face folders of every family we train: config.json's model_type picks GPT-2
// (checkpoint/hf_gpt2.h) or Llama / Mixtral (checkpoint/hf_llama.h).
#pragma once

#include <filesystem>

#include "checkpoint/hf_token_ids.h"
#include "checkpoint/hf_weight_files.h"

#include "nn/model_config.h"
#include "nn/named_tensor.h"
#include "nn/parameter_values.h"

namespace tessera {

// The families whose Hugging Face folders Tessera reads, for help texts.
#define TESSERA_HF_FAMILIES \
  "GPT-2, Llama, Mistral, Qwen2/3, Qwen3-MoE, Mixtral, Phi-3/4, OLMo 2, OLMoE, SmolLM3, Gemma 3, StarCoder2 or " \
  "DeepSeek-V2/V3"

// Reads dir/config.json; an unknown model_type is refused naming the ones we load.
ModelConfig read_hf_config(const std::filesystem::path& dir);
void load_hf_model(const std::filesystem::path& dir, const ModelConfig& config, NamedTensors& params);
// The folder's weights as `layout` holds them (a tp rank's slices, a pipeline stage, an ep rank's
// experts), every tensor checked up front; values are read on demand, one whole parameter at a time,
// so a rank (or a ZeRO-3 shard) never holds the whole model.
ParameterValues hf_model_values(const std::filesystem::path& dir, const ModelConfig& config,
                                const ParameterLayout& layout);
void save_hf_model(const std::filesystem::path& dir, const ModelConfig& config, const NamedTensors& params);
// From the whole model's values, read as the files are written (a checkpoint's: an export never holds
// more than one file's tensors) stored as `type` says (F32, BF16 or F16; FP8 blocks for every family
// but GPT-2, whose Conv1D weights have no such form); config.json names `ids` (those of the tokenizer
// exported beside).
void save_hf_model(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                   const HfTokenIds& ids = {}, HfWeightType type = {});

}  // namespace tessera
