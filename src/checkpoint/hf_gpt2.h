// GPT-2 <-> Hugging Face (config.json + model.safetensors, or shards with
// model.safetensors.index.json as save_pretrained writes models above its shard size: the files
// GPT2LMHeadModel reads and writes). Our Linear weights are (out, in); HF's Conv1D weights are
// (in, out), so c_attn, c_proj and c_fc weights are transposed both ways. Our wte has Vp >= V rows:
// the first V come from HF, the padding rows are zero. lm_head is tied to wte, never stored.
#pragma once

#include <filesystem>

#include "checkpoint/hf_source.h"
#include "checkpoint/hf_token_ids.h"
#include "nn/model_config.h"
#include "nn/named_tensor.h"

namespace tessera {

// Reads a Hugging Face GPT-2 config.json (n_layer, n_head, n_embd, vocab_size, n_positions or
// n_ctx) and checks that the model is one we implement; errors name the file and the field.
ModelConfig read_hf_gpt2_config(const std::filesystem::path& config_json);

// dir's weights (one file or sharded) checked against `config` (every tensor present, shaped and of
// a loadable dtype, none of another model, a stored lm_head equal to wte) as the source of our
// parameters.
HfSource open_hf_gpt2(const std::filesystem::path& dir, const ModelConfig& config);
// Fills `params` (our names, fp32, CPU) in place from dir's safetensors (F32, BF16 or F16;
// names with or without the "transformer." prefix). Every tensor's name, shape and dtype are
// checked before any is written; a NaN or infinity stops the load as its tensor is read.
void load_hf_gpt2(const std::filesystem::path& dir, const ModelConfig& config, NamedTensors& params);

// Writes dir/config.json and dir/model.safetensors ("transformer." names, HF layout, metadata
// {"format": "pt"}) atomically, creating `dir` if needed.
void save_hf_gpt2(const std::filesystem::path& dir, const ModelConfig& config, const NamedTensors& params);
// The same from the whole model's values (a checkpoint's, say); bos/eos_token_id are `ids`' when known,
// else the vocabulary's last id below 50257 (GPT-2's <|endoftext|> is 50256); weights in `dtype` (F32,
// BF16 or F16: write_hf_weights).
void save_hf_gpt2(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                  const HfTokenIds& ids = {}, DType dtype = DType::f32);

}  // namespace tessera
