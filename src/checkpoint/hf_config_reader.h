// Reading a Hugging Face config.json: typed optional fields that name the file and key in every error,
// rope_scaling (Llama 3.1's, YaRN) both ways, and numbers written back as their shortest decimal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/model_config.h"
#include "ops/rope.h"

namespace tessera {

// The JSON object of the config.json at `path`; throws naming the file when it is unreadable, too large,
// not JSON or not an object. transformers 5's rope_parameters dict comes folded into the older top-level
// rope_theta (partial_rotary_factor, Phi-3's original_max_position_embeddings) and rope_scaling fields. A
// multimodal Gemma 3's config ("gemma3") comes as its text model's ("gemma3_text", its text_config).
nlohmann::json read_hf_config_json(const std::filesystem::path& path);

class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& config, const std::filesystem::path& path);

  // The field, or null when it is absent or JSON null.
  const nlohmann::json* find(const char* key) const;
  // A positive integer; `fallback` (>= 0) when absent, else absence is an error.
  int64_t integer(const char* key, int64_t fallback = -1) const;
  // An integer >= 0; `fallback` when absent.
  int64_t count(const char* key, int64_t fallback) const;
  // A positive finite number, `fallback` when absent.
  float number(const char* key, float fallback) const;
  // A positive finite number, 0 when JSON null, `fallback` when absent (Gemma 2's soft caps, on by default).
  float number_or_null(const char* key, float fallback) const;
  bool boolean(const char* key, bool fallback) const;
  // An optional field that must hold `expected` when present; `why` ends the error.
  void expect(const char* key, const nlohmann::json& expected, const char* why) const;
  // "Hugging Face config '<path>'", the start of every error.
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& config_;
  std::string where_;
};

// The Llama family's common config (Llama naming, RMSNorm, RoPE, SwiGLU, no biases) with
// num_hidden_layers, num_attention_heads, hidden_size and vocab_size read: what Llama, Qwen, Mixtral and
// DeepSeek configs share.
ModelConfig llama_family_config(const HfConfigReader& r);

// rope_scaling of rope_type "llama3" (Llama 3.1's frequency scaling), "yarn" or "longrope" into `rope`
// (YaRN's original_max_position_embeddings defaulting to `max_positions`, as transformers does;
// LongRoPE's read from the config's top level, as Phi-3 writes it); any other type is refused naming it.
void read_rope_scaling(const HfConfigReader& r, const nlohmann::json& scaling, int64_t max_positions,
                       RopeConfig& rope);
// The rope_scaling a config.json writes for `rope`: null, a llama3 dict, a yarn dict (the magnitude
// terms only when given) or a longrope dict (its original_max_position_embeddings goes at the top level).
nlohmann::json rope_scaling_json(const RopeConfig& rope);

// Partial rotary: a head's first int(head_size * factor) channels rotate, factor the config's `key` (or
// `fallback`); the rotated channels, 0 when all of them (Tessera's ModelConfig::rotary_dims). Refuses a
// factor that rotates an odd number of channels, fewer than 2, or more than the head.
int64_t read_rotary_dims(const HfConfigReader& r, const char* key, float fallback, int64_t head_size);
// The factor a config.json writes for `rotated` of a head's `head_size` channels: the ratio, nudged up
// where transformers' int(head_dim * factor) would otherwise truncate it to one channel fewer.
double partial_rotary_factor(int64_t rotated, int64_t head_size);

// `v` as the double its shortest decimal spells, so config.json reads 1e-05, not the float's
// 9.999999747378752e-06 (the same float when read back).
double json_float(float v);

}  // namespace tessera
