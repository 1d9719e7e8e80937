// GPT-NeoX <-> Hugging Face folders (the files GPTNeoXForCausalLM reads and writes: Pythia, GPT-NeoX-20B).
// Its tensors are our Llama-named parameters under GPT-NeoX's names (gpt_neox.layers.{l}.attention.dense is
// o_proj, mlp.dense_h_to_4h up_proj, ...; embed_in and embed_out the embedding and head), but for
// attention.query_key_value, which interleaves each head's rows (head h's q, then its k, then its v) and
// rotates the first R channels of each q/k head where Tessera's RoPE turns the last: the import reorders its
// rows and bias into ours (every head's q, then every k, then every v; the rotary rows last in each q/k
// head), the export back. Untied (embed_out) unless tie_word_embeddings.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_source.h"
#include "checkpoint/hf_token_ids.h"
#include "checkpoint/hf_weight_files.h"
#include "nn/model_config.h"

namespace tessera {

// A config.json of model_type "gpt_neox" as our config (the exact GELU, or GPT-NeoX-20B's tanh form, LayerNorms,
// biases everywhere, partial rotary, the parallel residual or not); `path` names the file in errors. What Tessera
// does not compute (another activation, no attention biases, RoPE scaling) is refused naming the key.
ModelConfig hf_gpt_neox_config(const nlohmann::json& config, const std::filesystem::path& path);
// Whether `config` is GPT-NeoX's computation, which GPTNeoXForCausalLM's files hold.
bool has_hf_gpt_neox_form(const ModelConfig& config);

// dir's weights checked against `config` (every tensor present, shaped and of a loadable dtype, none of
// another model; the attention's old mask and inverse-frequency buffers skipped) as our parameters' source.
HfSource open_hf_gpt_neox(const std::filesystem::path& dir, const ModelConfig& config);
// Writes dir/config.json and the weights as `type` says (F32, BF16 or F16; no FP8 form), shards of at most
// `max_shard_bytes`, from the whole model's values; config.json names `ids` when known.
void save_hf_gpt_neox(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                      int64_t max_shard_bytes = int64_t(5) << 30, const HfTokenIds& ids = {}, HfWeightType type = {});

}  // namespace tessera
