// Hugging Face GPT-2 adapter: save -> load round trips every value (padding rows come back zero),
// HF-style files (no prefix, mask buffers, tied lm_head, BF16) load, bad config.json and bad
// tensors give errors naming the file and the tensor, and PyTorch (struct/json/torch.frombuffer in
// read_safetensors.py) sees the names, shapes, dtypes and Conv1D (in, out) layout HF users expect.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_gpt2.h"
#include "checkpoint/hf_model.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "nn/model_presets.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using nlohmann::json;
using testing::scratch_dir;

// Our GPT-2 parameters as views into one flat buffer, written out here independently of the adapter.
NamedTensors make_params(const ModelConfig& config, Tensor& flat) {
  int64_t C = config.channels;
  std::vector<std::pair<std::string, Shape>> layout = {{"wte", {config.padded_vocab_size(), C}},
                                                       {"wpe", {config.max_seq_len, C}}};
  for (int64_t i = 0; i < config.num_layers; ++i) {
    std::string h = "h." + std::to_string(i) + ".";
    for (auto& entry : std::vector<std::pair<std::string, Shape>>{
             {"ln_1.weight", {C}}, {"ln_1.bias", {C}}, {"attn.c_attn.weight", {3 * C, C}},
             {"attn.c_attn.bias", {3 * C}}, {"attn.c_proj.weight", {C, C}}, {"attn.c_proj.bias", {C}},
             {"ln_2.weight", {C}}, {"ln_2.bias", {C}}, {"mlp.c_fc.weight", {4 * C, C}}, {"mlp.c_fc.bias", {4 * C}},
             {"mlp.c_proj.weight", {C, 4 * C}}, {"mlp.c_proj.bias", {C}}})
      layout.push_back({h + entry.first, entry.second});
  }
  layout.push_back({"ln_f.weight", {C}});
  layout.push_back({"ln_f.bias", {C}});
  flat = Tensor::zeros({config.num_parameters()});
  NamedTensors params;
  int64_t offset = 0;
  for (auto& [name, shape] : layout) {
    params.push_back({name, flat.view(offset, shape)});
    offset += shape_numel(shape);
  }
  EXPECT_EQ(offset, config.num_parameters());
  return params;
}

const Tensor& param(const NamedTensors& params, const std::string& name) {
  for (const NamedTensor& p : params)
    if (p.name == name) return p.tensor;
  throw std::runtime_error("no parameter " + name);
}

using testing::error_of;

ModelConfig tiny() { return model_preset("gpt2-tiny"); }  // L=2, NH=2, C=32, V=256, maxT=64

// Tiny with V = 200, so that wte has 56 padding rows.
ModelConfig tiny_padded() {
  ModelConfig config = tiny();
  config.vocab_size = 200;
  return config;
}

TEST(HFGPT2, SaveLoadRoundTripsEveryValueAndZeroesPadding) {
  ModelConfig config = tiny_padded();
  Tensor flat_a, flat_b;
  NamedTensors a = make_params(config, flat_a), b = make_params(config, flat_b);
  std::vector<float> values = testing::random_floats(flat_a.numel(), 11);
  std::copy(values.begin(), values.end(), flat_a.f32());
  std::fill(flat_b.f32(), flat_b.f32() + flat_b.numel(), 99.0f);

  std::filesystem::path dir = scratch_dir() / "out" / "hf";  // save creates the folder
  save_hf_gpt2(dir, config, a);
  load_hf_gpt2(dir, config, b);

  int64_t V = config.vocab_size, C = config.channels;
  for (size_t k = 0; k < a.size(); ++k) {
    const float* x = a[k].tensor.f32();
    const float* y = b[k].tensor.f32();
    int64_t real = a[k].name == "wte" ? V * C : a[k].tensor.numel();
    for (int64_t i = 0; i < real; ++i) ASSERT_EQ(y[i], x[i]) << a[k].name << " element " << i;
    for (int64_t i = real; i < a[k].tensor.numel(); ++i) ASSERT_EQ(y[i], 0.0f) << "padding element " << i;
  }

  ModelConfig back = read_hf_gpt2_config(dir / "config.json");
  EXPECT_EQ(back.num_layers, config.num_layers);
  EXPECT_EQ(back.num_heads, config.num_heads);
  EXPECT_EQ(back.channels, config.channels);
  EXPECT_EQ(back.vocab_size, 200);
  EXPECT_EQ(back.max_seq_len, config.max_seq_len);
  json hf = json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"], json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(hf["eos_token_id"], 199);
  EXPECT_EQ(hf["activation_function"], "gelu_new");
  EXPECT_EQ(hf["tie_word_embeddings"], true);
}

TEST(HFGPT2, SavesHuggingFaceNamesAndConv1DLayout) {
  ModelConfig config = tiny_padded();
  Tensor flat;
  NamedTensors params = make_params(config, flat);
  std::vector<float> values = testing::random_floats(flat.numel(), 12);
  std::copy(values.begin(), values.end(), flat.f32());
  std::filesystem::path dir = scratch_dir();
  save_hf_gpt2(dir, config, params);

  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.tensors().size(), params.size());
  EXPECT_EQ(file.info("transformer.wte.weight").shape, (Shape{200, 32}));
  EXPECT_EQ(file.info("transformer.h.1.mlp.c_fc.weight").shape, (Shape{32, 128}));
  std::vector<float> w = file.read_f32("transformer.h.1.mlp.c_fc.weight");
  const float* ours = param(params, "h.1.mlp.c_fc.weight").f32();  // (4C, C)
  for (int64_t i = 0; i < 32; ++i)
    for (int64_t o = 0; o < 128; ++o) ASSERT_EQ(w[size_t(i * 128 + o)], ours[o * 32 + i]);
  EXPECT_EQ(read_hf_gpt2_config(dir / "config.json").vocab_size, 200);
}

TEST(HFGPT2, LoadsUnprefixedBf16WithBuffersAndTiedHead) {
  ModelConfig config = tiny();
  Tensor flat_a, flat_b;
  NamedTensors a = make_params(config, flat_a), b = make_params(config, flat_b);
  std::vector<float> values = testing::random_floats(flat_a.numel(), 13);
  std::copy(values.begin(), values.end(), flat_a.f32());
  std::filesystem::path dir = scratch_dir();
  save_hf_gpt2(dir, config, a);

  // Rewrite as the original OpenAI upload does it: no prefix, mask buffers, lm_head, here in BF16.
  std::vector<std::vector<bf16>> storage;
  std::vector<SafetensorsEntry> entries;
  {
    SafetensorsFile saved(dir / "model.safetensors");
    for (const SafetensorsInfo& info : saved.tensors()) {
      storage.emplace_back();
      for (float v : saved.read_f32(info.name)) storage.back().push_back(to_bf16(v));
      entries.push_back({info.name.substr(std::string("transformer.").size()), DType::bf16, info.shape,
                         storage.back().data()});
      if (info.name == "transformer.wte.weight")
        entries.push_back({"lm_head.weight", DType::bf16, info.shape, storage.back().data()});
    }
  }
  std::vector<float> mask(64 * 64, 1.0f);
  entries.push_back({"h.0.attn.bias", DType::f32, {1, 1, 64, 64}, mask.data()});
  entries.push_back({"h.1.attn.masked_bias", DType::f32, {}, mask.data()});
  write_safetensors(dir / "model.safetensors", entries);

  load_hf_gpt2(dir, config, b);
  for (size_t k = 0; k < a.size(); ++k)
    for (int64_t i = 0; i < a[k].tensor.numel(); ++i) {
      float x = a[k].tensor.f32()[i], y = b[k].tensor.f32()[i];
      ASSERT_EQ(y, to_float(to_bf16(x))) << a[k].name << " element " << i;
    }
}

// A GPT-2 above save_pretrained's shard size (gpt2-xl in F32: 6.4 GB) comes as shards with an
// index; it loads as the single file does.
TEST(HFGPT2, LoadsShardsListedByAnIndex) {
  ModelConfig config = tiny_padded();
  Tensor flat_a, flat_b;
  NamedTensors a = make_params(config, flat_a), b = make_params(config, flat_b);
  std::vector<float> values = testing::random_floats(flat_a.numel(), 14);
  std::copy(values.begin(), values.end(), flat_a.f32());
  std::filesystem::path dir = scratch_dir();
  save_hf_gpt2(dir, config, a);
  {
    SafetensorsFile saved(dir / "model.safetensors");
    std::vector<SafetensorsEntry> shards[2];
    json weight_map = json::object();
    for (size_t i = 0; i < saved.tensors().size(); ++i) {
      const SafetensorsInfo& info = saved.tensors()[i];
      const std::string shard = "model-0000" + std::to_string(i % 2 + 1) + "-of-00002.safetensors";
      shards[i % 2].push_back({info.name, DType::f32, info.shape, saved.bytes(info.name).data()});
      weight_map[info.name] = shard;
    }
    write_safetensors(dir / "model-00001-of-00002.safetensors", shards[0]);
    write_safetensors(dir / "model-00002-of-00002.safetensors", shards[1]);
    testing::write_text(dir / "model.safetensors.index.json",
                        json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  }
  std::filesystem::remove(dir / "model.safetensors");
  load_hf_gpt2(dir, config, b);
  for (int64_t i = 0; i < config.vocab_size * config.channels; ++i) ASSERT_EQ(flat_b.f32()[i], flat_a.f32()[i]) << i;
  for (int64_t i = config.padded_vocab_size() * config.channels; i < flat_a.numel(); ++i)
    ASSERT_EQ(flat_b.f32()[i], flat_a.f32()[i]) << i;
}

TEST(HFGPT2, ConfigErrorsNameTheFileAndField) {
  std::filesystem::path dir = scratch_dir();
  std::filesystem::path path = dir / "config.json";
  auto config_error = [&](const std::string& text) {
    testing::write_text(path, text);
    std::string message = error_of([&] { read_hf_gpt2_config(path); });
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    return message;
  };
  json good = {{"model_type", "gpt2"}, {"n_layer", 2},    {"n_head", 2},    {"n_embd", 32},
               {"vocab_size", 256},    {"n_ctx", 64}, {"activation_function", "gelu_new"}};
  testing::write_text(path, good.dump());
  EXPECT_EQ(read_hf_gpt2_config(path).max_seq_len, 64);  // n_ctx stands in for n_positions

  EXPECT_NE(config_error("{\"n_layer\": 2,").find("not valid JSON"), std::string::npos);
  json missing = good;
  missing.erase("n_head");
  EXPECT_NE(config_error(missing.dump()).find("'n_head'"), std::string::npos);
  json heads = good;
  heads["n_head"] = 3;
  EXPECT_NE(config_error(heads.dump()).find("does not divide"), std::string::npos);
  json llama = good;
  llama["model_type"] = "llama";
  EXPECT_NE(config_error(llama.dump()).find("'model_type'"), std::string::npos);
  json relu = good;
  relu["activation_function"] = "relu";
  EXPECT_NE(config_error(relu.dump()).find("'activation_function'"), std::string::npos);
  json eps = good;
  eps["layer_norm_epsilon"] = 1e-6;
  EXPECT_NE(config_error(eps.dump()).find("'layer_norm_epsilon'"), std::string::npos);
  json text = good;
  text["n_embd"] = "32";
  EXPECT_NE(config_error(text.dump()).find("'n_embd'"), std::string::npos);
  EXPECT_NE(config_error("[]").find("object"), std::string::npos);
}

// A Tessera run folder where a Hugging Face folder belongs (--init-from runs/x) says what it is and
// how to use or export it, not only that config.json is missing.
TEST(HFGPT2, ATesseraRunFolderIsNamedAsOne) {
  const std::filesystem::path dir = scratch_dir();
  testing::write_text(dir / "ckpt-latest", "ckpt-00000001");
  const std::string message = error_of([&] { read_hf_config(dir); });
  EXPECT_NE(message.find("is a Tessera checkpoint, not a Hugging Face folder"), std::string::npos) << message;
  EXPECT_NE(message.find("tessera convert --checkpoint"), std::string::npos) << message;
}

TEST(HFGPT2, MismatchedTensorsNameTheTensorAndFile) {
  ModelConfig config = tiny();
  Tensor flat;
  NamedTensors params = make_params(config, flat);
  std::filesystem::path dir = scratch_dir();
  save_hf_gpt2(dir, config, params);
  std::string file = (dir / "model.safetensors").string();

  ModelConfig longer = config;
  longer.max_seq_len = 128;
  Tensor flat_longer;
  NamedTensors params_longer = make_params(longer, flat_longer);
  std::string message = error_of([&] { load_hf_gpt2(dir, longer, params_longer); });
  EXPECT_NE(message.find("transformer.wpe.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("(64, 32)"), std::string::npos) << message;
  EXPECT_NE(message.find("(128, 32)"), std::string::npos) << message;
  EXPECT_NE(message.find(file), std::string::npos) << message;

  ModelConfig shallower = config;
  shallower.num_layers = 1;
  Tensor flat_shallower;
  NamedTensors params_shallower = make_params(shallower, flat_shallower);
  message = error_of([&] { load_hf_gpt2(dir, shallower, params_shallower); });
  EXPECT_NE(message.find("unexpected tensor 'transformer.h.1."), std::string::npos) << message;

  // A missing tensor, and an lm_head that is not tied to wte.
  std::vector<float> head(256 * 32, 0.5f);
  std::vector<SafetensorsEntry> entries;
  {
    SafetensorsFile saved(dir / "model.safetensors");
    for (const SafetensorsInfo& info : saved.tensors())
      if (info.name != "transformer.ln_f.bias")
        entries.push_back({info.name, DType::f32, info.shape, saved.bytes(info.name).data()});
    write_safetensors(dir / "missing.safetensors", entries);
    entries.push_back({"transformer.ln_f.bias", DType::f32, {32}, saved.bytes("transformer.ln_f.bias").data()});
    entries.push_back({"lm_head.weight", DType::f32, {256, 32}, head.data()});
    write_safetensors(dir / "untied.safetensors", entries);
  }
  std::filesystem::rename(dir / "missing.safetensors", dir / "model.safetensors");
  message = error_of([&] { load_hf_gpt2(dir, config, params); });
  EXPECT_NE(message.find("'transformer.ln_f.bias' is missing"), std::string::npos) << message;
  std::filesystem::rename(dir / "untied.safetensors", dir / "model.safetensors");
  message = error_of([&] { load_hf_gpt2(dir, config, params); });
  EXPECT_NE(message.find("lm_head.weight"), std::string::npos) << message;

  std::filesystem::path empty = dir / "empty";
  std::filesystem::create_directory(empty);
  message = error_of([&] { load_hf_gpt2(empty, config, params); });
  EXPECT_NE(message.find("has neither model.safetensors nor model.safetensors.index.json"), std::string::npos) << message;
}

// Runs tests/checkpoint/read_safetensors.py on `file` with Debian's python3 + torch; nullopt when
// they are not installed.
std::optional<json> read_with_pytorch(const std::filesystem::path& file) {
  const std::string python = "/usr/bin/python3";
  if (testing::run_command(python + " -c 'import torch'").exit_code != 0) return std::nullopt;
  std::filesystem::path out = file.parent_path() / "pytorch_view.json";
  std::string script = std::string(TESSERA_SOURCE_DIR) + "/tests/checkpoint/read_safetensors.py";
  testing::CommandResult result =
      testing::run_command(python + " '" + script + "' '" + file.string() + "' '" + out.string() + "'");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return json::parse(testing::read_text(out));
}

TEST(PyTorchCrossCheck, ReadsOurF32Bf16F16Values) {
  std::filesystem::path path = scratch_dir() / "t.safetensors";
  std::vector<float> f32 = testing::random_floats(6, 21);
  std::vector<bf16> b16;
  std::vector<f16> h16;
  for (float v : f32) {
    b16.push_back(to_bf16(v));
    h16.push_back(to_f16(v));
  }
  write_safetensors(path, {{"f", DType::f32, {2, 3}, f32.data()},
                           {"b", DType::bf16, {3, 2}, b16.data()},
                           {"h", DType::f16, {6}, h16.data()}},
                    {{"format", "pt"}});
  std::optional<json> seen = read_with_pytorch(path);
  if (!seen) GTEST_SKIP() << "/usr/bin/python3 with torch is not installed";
  EXPECT_EQ((*seen)["header_bytes"].get<uint64_t>() % 8, 0u);
  EXPECT_EQ((*seen)["metadata"]["format"], "pt");
  const json& t = (*seen)["tensors"];
  EXPECT_EQ(t["b"]["dtype"], "BF16");
  EXPECT_EQ(t["b"]["shape"], json::array({3, 2}));
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(t["f"]["values"][i].get<double>(), double(f32[i]));
    EXPECT_EQ(t["b"]["values"][i].get<double>(), double(to_float(b16[i])));
    EXPECT_EQ(t["h"]["values"][i].get<double>(), double(to_float(h16[i])));
  }
}

TEST(PyTorchCrossCheck, SeesHuggingFaceGpt2Layout) {
  ModelConfig config = tiny_padded();
  Tensor flat;
  NamedTensors params = make_params(config, flat);
  std::vector<float> values = testing::random_floats(flat.numel(), 22);
  std::copy(values.begin(), values.end(), flat.f32());
  std::filesystem::path dir = scratch_dir();
  save_hf_gpt2(dir, config, params);
  std::optional<json> seen = read_with_pytorch(dir / "model.safetensors");
  if (!seen) GTEST_SKIP() << "/usr/bin/python3 with torch is not installed";

  const json& tensors = (*seen)["tensors"];
  EXPECT_EQ((*seen)["metadata"]["format"], "pt");
  EXPECT_EQ(tensors.size(), params.size());
  for (const NamedTensor& p : params) {
    std::string name = "transformer." + p.name + (p.name == "wte" || p.name == "wpe" ? ".weight" : "");
    ASSERT_TRUE(tensors.contains(name)) << name;
    const json& t = tensors[name];
    EXPECT_EQ(t["dtype"], "F32") << name;
    const float* ours = p.tensor.f32();
    std::vector<int64_t> shape = t["shape"].get<std::vector<int64_t>>();
    bool conv1d = p.tensor.ndim() == 2 && p.name.starts_with("h.");
    if (conv1d) {
      // HF Conv1D: (in, out) = our (out, in) transposed, and x @ W + b equals our W x + b.
      int64_t out = p.tensor.size(0), in = p.tensor.size(1);
      ASSERT_EQ(shape, (std::vector<int64_t>{in, out})) << name;
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o)
          ASSERT_EQ(t["values"][size_t(i * out + o)].get<double>(), double(ours[o * in + i])) << name;
      std::string bias_name = p.name.substr(0, p.name.size() - std::string("weight").size()) + "bias";
      const float* bias = param(params, bias_name).f32();
      for (int64_t o = 0; o < out; ++o) {
        double y = bias[o];
        for (int64_t i = 0; i < in; ++i) y += double(ours[o * in + i]) * double(i % 7 - 3);
        EXPECT_NEAR(t["conv1d"][size_t(o)].get<double>(), y, 1e-4) << name << " output " << o;
      }
    } else {
      Shape expected = p.name == "wte" ? Shape{config.vocab_size, config.channels} : p.tensor.shape();
      ASSERT_EQ(shape, expected) << name;
      for (int64_t i = 0; i < shape_numel(expected); ++i)
        ASSERT_EQ(t["values"][size_t(i)].get<double>(), double(ours[i])) << name;
    }
  }
}

}  // namespace
}  // namespace tessera
