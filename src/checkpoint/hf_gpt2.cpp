// The GPT-2 name and layout map between our parameters and Hugging Face's GPT2LMHeadModel, and the
// config.json translation. A loaded file must hold exactly the tensors this config expects (plus
// HF's attention-mask buffers and the tied lm_head); anything else is an error, never ignored.
#include "checkpoint/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "checkpoint/hf_config_reader.h"
#include "checkpoint/hf_source.h"
#include "checkpoint/hf_weight_files.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/json_excerpt.h"
#include "nn/decoder_layout.h"

namespace tessera {

namespace {

using nlohmann::json;

// One parameter: our name and shape, the HF name (without "transformer.") and HF shape.
// Conv1D weights are transposed: ours (out, in), HF (in, out). Otherwise the HF tensor is the
// leading elements of ours (wte: the first V of Vp rows) and the rest of ours is zero.
struct HFTensor {
  std::string ours;
  std::string hf;
  Shape shape;
  Shape hf_shape;
  bool transpose = false;
};

std::vector<HFTensor> hf_gpt2_tensors(const ModelConfig& config) {
  int64_t C = config.channels, V = config.vocab_size;
  std::vector<HFTensor> tensors = {
      {"wte", "wte.weight", {config.padded_vocab_size(), C}, {V, C}},
      {"wpe", "wpe.weight", {config.max_seq_len, C}, {config.max_seq_len, C}},
  };
  auto same = [&](const std::string& name, Shape shape) { tensors.push_back({name, name, shape, shape}); };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    tensors.push_back({name + ".weight", name + ".weight", {out, in}, {in, out}, true});
    same(name + ".bias", {out});
  };
  for (int64_t i = 0; i < config.num_layers; ++i) {
    std::string h = "h." + std::to_string(i) + ".";
    same(h + "ln_1.weight", {C});
    same(h + "ln_1.bias", {C});
    linear(h + "attn.c_attn", 3 * C, C);
    linear(h + "attn.c_proj", C, C);
    same(h + "ln_2.weight", {C});
    same(h + "ln_2.bias", {C});
    linear(h + "mlp.c_fc", 4 * C, C);
    linear(h + "mlp.c_proj", C, 4 * C);
  }
  same("ln_f.weight", {C});
  same("ln_f.bias", {C});
  return tensors;
}

int64_t config_int(const json& config, const std::filesystem::path& path, const char* field) {
  auto it = config.find(field);
  TS_CHECK(it != config.end(), "Hugging Face config ", path, ": missing field '", field, "'");
  TS_CHECK(it->is_number_integer(), "Hugging Face config ", path, ": field '", field, "' must be an integer, got ",
           json_excerpt(*it));
  return it->get<int64_t>();
}

// The optional string field `field`, when present, must be one of `allowed`.
void check_config_string(const json& config, const std::filesystem::path& path, const char* field,
                         std::initializer_list<const char*> allowed, const char* why) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return;
  for (const char* value : allowed)
    if (it->is_string() && it->get<std::string>() == value) return;
  TS_FAIL("Hugging Face config ", path, ": field '", field, "' is ", json_excerpt(*it), "; ", why);
}

// The optional boolean field `field`, when present, must equal `expected`.
void check_config_bool(const json& config, const std::filesystem::path& path, const char* field, bool expected,
                       const char* why) {
  auto it = config.find(field);
  if (it == config.end()) return;
  TS_CHECK(it->is_boolean() && it->get<bool>() == expected, "Hugging Face config ", path, ": field '", field,
           "' is ", json_excerpt(*it), "; ", why);
}

}  // namespace

ModelConfig read_hf_gpt2_config(const std::filesystem::path& config_json) {
  const std::filesystem::path& path = config_json;
  const json config = read_hf_config_json(path);

  check_config_string(config, path, "model_type", {"gpt2"}, "only GPT-2 checkpoints load as GPT-2");
  // gelu_new and gelu_pytorch_tanh are both the tanh approximation our GELU computes.
  check_config_string(config, path, "activation_function", {"gelu_new", "gelu_pytorch_tanh"},
                      "Tessera's GPT-2 uses the tanh GELU (gelu_new)");
  if (auto it = config.find("layer_norm_epsilon"); it != config.end()) {
    TS_CHECK(it->is_number() && std::abs(it->get<double>() - 1e-5) <= 1e-9, "Hugging Face config ", path,
             ": field 'layer_norm_epsilon' is ", json_excerpt(*it), "; Tessera's layernorm uses 1e-5");
  }
  check_config_bool(config, path, "scale_attn_weights", true, "Tessera scales attention by 1/sqrt(head size)");
  check_config_bool(config, path, "scale_attn_by_inverse_layer_idx", false,
                    "Tessera does not scale attention by layer index");
  check_config_bool(config, path, "tie_word_embeddings", true, "Tessera's GPT-2 ties lm_head to wte");

  ModelConfig result;
  result.num_layers = config_int(config, path, "n_layer");
  result.num_heads = config_int(config, path, "n_head");
  result.channels = config_int(config, path, "n_embd");
  result.vocab_size = config_int(config, path, "vocab_size");
  bool has_positions = config.contains("n_positions");
  TS_CHECK(has_positions || config.contains("n_ctx"), "Hugging Face config ", path,
           ": missing field 'n_positions' (or 'n_ctx')");
  result.max_seq_len = config_int(config, path, has_positions ? "n_positions" : "n_ctx");
  if (auto it = config.find("n_inner"); it != config.end() && !it->is_null()) {
    TS_CHECK(it->is_number_integer() && it->get<int64_t>() == 4 * result.channels, "Hugging Face config ", path,
             ": field 'n_inner' is ", json_excerpt(*it), "; Tessera's MLP width is 4 * n_embd = ", 4 * result.channels);
  }
  try {
    result.validate();
  } catch (const Error& e) {
    TS_FAIL("Hugging Face config ", path, ": ", e.what());
  }
  return result;
}

HfSource open_hf_gpt2(const std::filesystem::path& dir, const ModelConfig& config) {
  config.validate();
  auto files = std::make_shared<const HfWeightFiles>(dir);
  const std::vector<std::string> names = files->names();
  // GPT2LMHeadModel files name parameters "transformer.*"; GPT2Model files (the OpenAI upload) do not.
  const bool prefixed = std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.starts_with("transformer."); });
  const std::string prefix = prefixed ? "transformer." : "";
  std::vector<HFTensor> tensors = hf_gpt2_tensors(config);

  // Every tensor in the files is a parameter, a mask buffer, or the tied lm_head.
  std::set<std::string> known;
  for (const HFTensor& t : tensors) known.insert(prefix + t.hf);
  for (int64_t i = 0; i < config.num_layers; ++i) {
    known.insert(prefix + "h." + std::to_string(i) + ".attn.bias");
    known.insert(prefix + "h." + std::to_string(i) + ".attn.masked_bias");
  }
  known.insert("lm_head.weight");
  for (const std::string& name : names)
    TS_CHECK(known.count(name), "Hugging Face weights ", files->description(), ": unexpected tensor '", name,
             "' for a GPT-2 with ", config.num_layers, " layers (checkpoint of another model?)");

  HfSource source;
  for (const HFTensor& t : tensors) {
    std::string name = prefix + t.hf;
    files->check(name, t.hf_shape);
    source.pieces.push_back({name, t.hf_shape, t.ours, 0, t.transpose});
  }
  if (files->contains("lm_head.weight")) {
    const std::string wte = prefix + "wte.weight";
    const SafetensorsInfo& head = files->file_of("lm_head.weight").info("lm_head.weight");
    const SafetensorsInfo& embed = files->file_of(wte).info(wte);
    TS_CHECK(head.dtype == embed.dtype && head.shape == embed.shape &&
                 std::ranges::equal(files->file_of(head.name).bytes(head.name), files->file_of(wte).bytes(wte)),
             "Hugging Face weights ", files->description(), ": lm_head.weight differs from ", wte,
             "; Tessera's GPT-2 needs tied embeddings");
  }
  source.read = [files](const std::string& name) { return files->read_f32(name); };
  return source;
}

void load_hf_gpt2(const std::filesystem::path& dir, const ModelConfig& config, NamedTensors& params) {
  load_hf_source(open_hf_gpt2(dir, config), config, params, "load_hf_gpt2");
}

void save_hf_gpt2(const std::filesystem::path& dir, const ModelConfig& config, const NamedTensors& params) {
  save_hf_gpt2(dir, config, values_of_named(decoder_layout(config), params, "save_hf_gpt2"));
}

void save_hf_gpt2(const std::filesystem::path& dir, const ModelConfig& config, const ParameterValues& values,
                  const HfTokenIds& ids, DType dtype) {
  config.validate();
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  TS_CHECK(!error, "save_hf_gpt2: cannot create folder ", dir, ": ", error.message());

  const ParameterLayout whole = decoder_layout(config);
  std::vector<HfTensorOut> tensors;
  for (const HFTensor& t : hf_gpt2_tensors(config)) {
    const ParamSpec& spec = whole.find(t.ours);
    const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 0, cols = t.shape.size() == 2 ? t.shape[1] : 0;
    const bool transpose = t.transpose;
    // wte: its first V rows are the leading elements of ours; a Conv1D weight is ours transposed.
    const int64_t begin = spec.offset, end = begin + (transpose ? spec.numel() : shape_numel(t.hf_shape));
    tensors.push_back({"transformer." + t.hf, t.hf_shape, [&values, begin, end, transpose, rows, cols](float* out) {
                         if (!transpose) return values({begin, end}, out);
                         std::vector<float> ours(size_t(end - begin));
                         values({begin, end}, ours.data());
                         transpose_into(ours.data(), rows, cols, out);
                       }});
  }
  write_hf_weights(dir, tensors, std::numeric_limits<int64_t>::max(), dtype);  // one model.safetensors, as GPT-2's loaders expect

  int64_t special_token = config.vocab_size >= 50257 ? 50256 : config.vocab_size - 1;
  json hf = {
      {"architectures", json::array({"GPT2LMHeadModel"})},
      {"model_type", "gpt2"},
      {"n_layer", config.num_layers},
      {"n_head", config.num_heads},
      {"n_embd", config.channels},
      {"n_positions", config.max_seq_len},
      {"n_ctx", config.max_seq_len},
      {"vocab_size", config.vocab_size},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"bos_token_id", special_token},
      {"eos_token_id", special_token},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", true},
      {"torch_dtype", hf_torch_dtype(dtype)},
  };
  put_hf_token_ids(hf, ids);
  write_file_atomic(dir / "config.json", hf.dump(2) + "\n");
}

}  // namespace tessera
