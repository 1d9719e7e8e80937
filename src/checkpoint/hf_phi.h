// Phi-1.5 and Phi-2 <-> Hugging Face folders (the files PhiForCausalLM reads and writes). Its tensors are our
// Llama-named parameters under Phi's names (self_attn.dense is o_proj, mlp.fc1 and fc2 the MLP's, one
// input_layernorm a block, model.final_layernorm), q_proj/k_proj/v_proj packed into our qkv, the first R rotary
// rows of each q/k head moved where Tessera's RoPE turns them (hf_rope_rows.h), and lm_head with its bias.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_source.h"
#include "checkpoint/hf_token_ids.h"
#include "checkpoint/hf_weight_files.h"
#include "nn/model_config.h"

namespace tessera {

// A config.json of model_type "phi" as our config (GELU's tanh form, or the exact one, LayerNorms and biases
// everywhere, partial rotary, attention and MLP side by side on one norm, a biased untied head); `path` names the
// file in errors. What Tessera does not compute (q/k layernorms, RoPE scaling, a tied head) is refused by field.
ModelConfig hf_phi_config(const nlohmann::json& config, const std::filesystem::path& path);
// Whether `config` is Phi-2's computation, which PhiForCausalLM's files hold.
bool has_hf_phi_form(const ModelConfig& config);

// dir's weights checked against `config` (every tensor present, shaped and of a loadable dtype, none of another
// model) as our parameters' source.
HfSource open_hf_phi(const std::filesystem::path& dir, const ModelConfig& config);
// Writes dir/config.json and the weights as `type` says (no FP8 form), shards of at most `max_shard_bytes`, from
// the whole model's values; config.json names `ids` when known.
void save_hf_phi(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                 int64_t max_shard_bytes = int64_t(5) << 30, const HfTokenIds& ids = {}, HfWeightType type = {});

}  // namespace tessera
