// Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE and Mixtral <-> Hugging Face folders (config.json plus
// model.safetensors, or a sharded model.safetensors.index.json with its shard files: the folders
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM and
// MixtralForCausalLM read and write). Mistral is Llama's architecture (imported as such, exported as Llama); Qwen2 is Llama's
// with q/k/v biases; Qwen3 Llama's with an RMSNorm over each query and key head (q_norm, k_norm) and
// heads of head_dim channels, not necessarily hidden_size / num_attention_heads; Qwen3-MoE is Qwen3's
// attention with Mixtral's routing, its router and experts (gate_proj, up_proj, down_proj) under "mlp". OLMo 2
// (Olmo2ForCausalLM) is Llama's with its block norms after attention (post_attention_layernorm) and the
// MLP (post_feedforward_layernorm), none before, and q_norm, k_norm over all heads' channels; OLMoE
// (OlmoeForCausalLM) has those q/k norms in pre-norm blocks with Qwen3-MoE's router and experts; SmolLM3
// (SmolLM3ForCausalLM) is Llama's with the blocks its no_rope_layers marks 0 taking no RoPE; Gemma 3
// (Gemma3ForCausalLM) adds post-sublayer norms (pre_feedforward_layernorm before the MLP), whose (1 + w)
// gains, and its q/k norms' and final norm's, are stored less 1. HF keeps
// q/k/v, gate/up and each expert as separate (out, in) tensors; ours pack them (decoder_layout.h):
// every HF tensor is one contiguous range of one of our parameters, so loading and saving copy
// without transposes. Mixtral's experts: w1 = gate, w3 = up, w2 = down. The embedding and an untied
// head hold the first V of our Vp rows; padding rows are 0. DeepSeek-V3's tensors are in this map
// too (latent attention's projections and norms, the router's selection bias, the shared experts);
// its config.json and RoPE tail order are checkpoint/hf_deepseek.h's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_source.h"
#include "checkpoint/hf_token_ids.h"
#include "checkpoint/hf_weight_files.h"
#include "nn/model_config.h"
#include "nn/named_tensor.h"

namespace tessera {

// Whether a config.json's model_type is one hf_llama_config reads: "llama", "mistral", "qwen2",
// "qwen3", "qwen3_moe", "mixtral", "phi3", "olmo2", "olmoe", "smollm3" or "gemma3_text".
bool is_hf_llama_type(const nlohmann::json& model_type);

// A config.json object of one of is_hf_llama_type's model types as our config; `path` names the file
// in errors. Unsupported features (another hidden_act or rope_scaling type, attention biases beyond
// Qwen2's or MLP biases, logit soft-capping) are refused naming the key.
ModelConfig hf_llama_config(const nlohmann::json& config, const std::filesystem::path& path);
// The config.json of a Llama-family model other than DeepSeek's, without torch_dtype and token ids.
nlohmann::json hf_llama_config_json(const ModelConfig& config);

// dir's weights checked against `config` (every tensor present, shaped and of a loadable dtype, none
// of another model) as the source of our parameters.
HfSource open_hf_llama(const std::filesystem::path& dir, const ModelConfig& config);
// Fills `params` (our names, fp32, CPU) from dir's safetensors (F32, BF16 or F16), single-file or
// sharded. Every tensor is checked (present, shape, dtype; no tensor of another model) before any is
// written; a NaN or infinity stops the load as its tensor is read.
void load_hf_llama(const std::filesystem::path& dir, const ModelConfig& config, NamedTensors& params);

// Writes dir/config.json and the weights (F32): one model.safetensors, or shards of at most
// `max_shard_bytes` plus model.safetensors.index.json when they do not fit in one. Each file is
// written atomically; `dir` is created if needed.
void save_hf_llama(const std::filesystem::path& dir, const ModelConfig& config, const NamedTensors& params,
                   int64_t max_shard_bytes = int64_t(5) << 30);
// The same from the whole model's values (a checkpoint's, say), read one shard at a time, stored as
// `type` says (write_hf_weights; FP8 blocks declared in config.json's quantization_config); config.json
// names `ids` (bos_token_id, eos_token_id) when known.
void save_hf_llama(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                   int64_t max_shard_bytes = int64_t(5) << 30, const HfTokenIds& ids = {}, HfWeightType type = {});

}  // namespace tessera
