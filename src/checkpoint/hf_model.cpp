// Dispatch on the model family for Hugging Face import and export.
#include "checkpoint/hf_model.h"

#include <nlohmann/json.hpp>

#include "checkpoint/hf_config_reader.h"
#include "checkpoint/hf_deepseek.h"
#include "checkpoint/hf_gpt2.h"
#include "checkpoint/hf_gpt_neox.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/hf_phi.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"
#include "nn/decoder_layout.h"

namespace tessera {
namespace {

constexpr const char* kModelTypes =
    "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"qwen3_moe\", \"mixtral\", \"phi3\", \"olmo2\", "
    "\"olmoe\", \"smollm3\", \"gemma\", \"gemma2\", \"gemma3_text\", \"gemma3\", \"starcoder2\", \"qwen2_moe\", "
    "\"glm4_moe\", \"cohere\", \"cohere2\", \"gpt_neox\", \"phi\", \"deepseek_v2\" or \"deepseek_v3\"";

// " (architecture 'X')" when the config names one, else nothing.
std::string architectures_text(const nlohmann::json& config) {
  auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) return "";
  return " (architecture " + quoted_text((*it)[0].get<std::string>(), 80) + ")";
}

}  // namespace

ModelConfig read_hf_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  // A Tessera run or checkpoint folder given where a Hugging Face folder belongs: say what it is.
  TS_CHECK(std::filesystem::exists(path) || !(std::filesystem::exists(dir / "state.json") ||
                                              std::filesystem::exists(dir / "ckpt-latest")),
           quoted_text(dir.string()), " is a Tessera checkpoint, not a Hugging Face folder (it has no config.json); ",
           "read it with --checkpoint, continue its run with --resume --out-dir (a training checkpoint), or start a ",
           "new run from its weights: tessera convert --checkpoint ", quoted_text(dir.string()),
           " --to-hf <folder>, then --init-from <folder>");
  const nlohmann::json config = read_hf_config_json(path);
  auto type = config.find("model_type");
  // Old GPT-2 configs carry no model_type; any other config without one names the field to add.
  TS_CHECK(type != config.end() || config.contains("n_layer"), "Hugging Face config ", quoted_text(path.string()),
           ": missing field 'model_type'", architectures_text(config), "; add the one transformers writes (",
           kModelTypes, ")");
  if (type == config.end() || *type == "gpt2") return read_hf_gpt2_config(path);
  if (is_hf_deepseek_type(*type)) return hf_deepseek_config(config, path);
  if (*type == "gpt_neox") return hf_gpt_neox_config(config, path);
  if (*type == "phi") return hf_phi_config(config, path);
  TS_CHECK(is_hf_llama_type(*type), "Hugging Face config ",
           quoted_text(path.string()), ": field 'model_type' is ", json_excerpt(*type), ", not a model Tessera loads (",
           kModelTypes, ")");
  return hf_llama_config(config, path);
}

void load_hf_model(const std::filesystem::path& dir, const ModelConfig& config, NamedTensors& params) {
  if (config.naming == Naming::gpt2) return load_hf_gpt2(dir, config, params);
  if (has_hf_gpt_neox_form(config))
    return load_hf_source(open_hf_gpt_neox(dir, config), config, params, "load_hf_gpt_neox");
  if (has_hf_phi_form(config)) return load_hf_source(open_hf_phi(dir, config), config, params, "load_hf_phi");
  load_hf_llama(dir, config, params);
}

void save_hf_model(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                   const HfTokenIds& ids, HfWeightType type) {
  TS_CHECK(config.naming != Naming::gpt2 || !type.fp8.enabled(), "a GPT-2 has no fine-grained FP8 form (its ",
           "Conv1D weights are not the linear layers transformers quantizes): export it in bf16 or fp16");
  if (config.naming == Naming::gpt2) return save_hf_gpt2(dir, config, values, ids, type.dtype);
  if (has_hf_gpt_neox_form(config)) return save_hf_gpt_neox(dir, config, values, int64_t(5) << 30, ids, type);
  if (has_hf_phi_form(config)) return save_hf_phi(dir, config, values, int64_t(5) << 30, ids, type);
  save_hf_llama(dir, config, values, int64_t(5) << 30, ids, type);
}

ParameterValues hf_model_values(const std::filesystem::path& dir, const ModelConfig& config,
                                const ParameterLayout& layout) {
  if (config.naming == Naming::gpt2) return hf_source_values(open_hf_gpt2(dir, config), config, layout, "load_hf_gpt2");
  if (has_hf_gpt_neox_form(config))
    return hf_source_values(open_hf_gpt_neox(dir, config), config, layout, "load_hf_gpt_neox");
  if (has_hf_phi_form(config)) return hf_source_values(open_hf_phi(dir, config), config, layout, "load_hf_phi");
  return hf_source_values(open_hf_llama(dir, config), config, layout, "load_hf_llama");
}

void save_hf_model(const std::filesystem::path& dir, const ModelConfig& config, const NamedTensors& params) {
  if (config.naming == Naming::gpt2) return save_hf_gpt2(dir, config, params);
  if (has_hf_gpt_neox_form(config))
    return save_hf_gpt_neox(dir, config, values_of_named(decoder_layout(config), params, "save_hf_gpt_neox"));
  if (has_hf_phi_form(config))
    return save_hf_phi(dir, config, values_of_named(decoder_layout(config), params, "save_hf_phi"));
  save_hf_llama(dir, config, params);
}

}  // namespace tessera
