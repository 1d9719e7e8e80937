// DeepSeek-V3 and V2 (model_types "deepseek_v3" and "deepseek_v2", DeepseekV3ForCausalLM and
// DeepseekV2ForCausalLM) <-> Tessera: the config.json translation both ways and the RoPE channel order.
// Their tensors are Llama-family ones and live in hf_llama's name map (latent attention's q_proj or
// q_a_proj/q_a_layernorm/q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; the MoE's mlp.gate
// with V3's e_score_correction_bias, mlp.experts and mlp.shared_experts).
// Covered: latent attention with or without a query latent; V3's sigmoid routing with the selection
// bias, V2's softmax routing, renormalised or not (norm_topk_prob); shared experts, dense first layers,
// routed_scaling_factor (V3 scales the routed output always, V2 only when it does not renormalise);
// YaRN rope_scaling (its mscale_all_dim's factor on the scores included); group-limited routing
// (n_group, topk_group: V3's noaux_tc, V2's group_limited_greedy). Refused, naming the key: attention
// biases, value heads wider than the q/k heads.
// RoPE order: DeepSeek's checkpoints keep each rotated tail interleaved (channel pairs 2i, 2i+1; V3's
// rope_interleave true, the default; V2 always), Tessera rotates halves (i, i + R/2): import reorders
// the tail rows of q_proj / q_b_proj (each head's) and of kv_a_proj_with_mqa (the shared key tail) to
// even channels then odd, export back; the attention scores are the same.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_config_reader.h"
#include "nn/model_config.h"

namespace tessera {

// "deepseek_v3" or "deepseek_v2".
bool is_hf_deepseek_type(const nlohmann::json& model_type);
// A config.json object of model_type "deepseek_v3" or "deepseek_v2" as our config; `path` names the
// file in errors.
ModelConfig hf_deepseek_config(const nlohmann::json& config, const std::filesystem::path& path);
// DeepSeek's expert fields, which GLM-4.5 shares: n_routed_experts, num_experts_per_tok, moe_intermediate_size,
// n_shared_experts (0 when absent) and first_k_dense_replace (0 when absent).
void read_deepseek_experts(const HfConfigReader& r, ModelConfig& config);
// Whether `config` has a DeepseekV3ForCausalLM (sigmoid router) or DeepseekV2ForCausalLM (softmax
// router, the routed output scaled only when the weights are not renormalised) form.
bool hf_deepseek_exportable(const ModelConfig& config);
// What dir/config.json says of the files beside it: whether the rotated tails are interleaved
// (rope_interleave, true when absent) and how many multi-token-prediction layers follow the model's
// (num_nextn_predict_layers, 0 when absent: model.layers.{L}... onwards, which Tessera does not load).
struct HfDeepseekFiles {
  bool rope_interleaved = true;
  int64_t prediction_layers = 0;
};
HfDeepseekFiles hf_deepseek_files(const std::filesystem::path& dir);
// config.json for `config` (hf_deepseek_exportable), weights interleaved.
nlohmann::json hf_deepseek_config_json(const ModelConfig& config);

// HF tensor `name`'s numel values (row-major) from interleaved to Tessera's order, in place; other
// tensors are left alone. interleave_rope_rows is the inverse (for export).
void deinterleave_rope_rows(const ModelConfig& config, const std::string& name, float* values, int64_t numel);
void interleave_rope_rows(const ModelConfig& config, const std::string& name, float* values, int64_t numel);

}  // namespace tessera
