// GPT-NeoX <-> Hugging Face folders: the names, shapes and config.json transformers' GPTNeoXForCausalLM
// reads; query_key_value's rows interleaved by head and rotated where HF rotates; every bit kept both ways,
// untied and tied, parallel and sequential; the old attention buffers skipped; what Tessera does not
// compute refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_gpt_neox.h"
#include "checkpoint/hf_model.h"
#include "checkpoint/hf_test_models.h"
#include "checkpoint/safetensors.h"
#include "nn/model_presets.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using testing::expect_same_bits;

TEST(HfGptNeox, NamesShapesAndConfigAreTransformers) {
  const ModelConfig config = model_preset("pythia-tiny");  // 4 heads of 16, RoPE on 4 of them
  const Decoder model = testing::random_hf_model(config, 3);
  const fs::path dir = testing::scratch_dir();
  save_hf_model(dir, config, model.named_params());
  const SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("gpt_neox.embed_in.weight").shape, (Shape{256, 64}));
  EXPECT_EQ(file.info("gpt_neox.layers.1.input_layernorm.bias").shape, (Shape{64}));
  EXPECT_EQ(file.info("gpt_neox.layers.1.post_attention_layernorm.weight").shape, (Shape{64}));
  EXPECT_EQ(file.info("gpt_neox.layers.1.attention.query_key_value.weight").shape, (Shape{192, 64}));
  EXPECT_EQ(file.info("gpt_neox.layers.1.attention.query_key_value.bias").shape, (Shape{192}));
  EXPECT_EQ(file.info("gpt_neox.layers.1.attention.dense.bias").shape, (Shape{64}));
  EXPECT_EQ(file.info("gpt_neox.layers.1.mlp.dense_h_to_4h.weight").shape, (Shape{256, 64}));
  EXPECT_EQ(file.info("gpt_neox.layers.1.mlp.dense_4h_to_h.bias").shape, (Shape{64}));
  EXPECT_EQ(file.info("gpt_neox.final_layer_norm.bias").shape, (Shape{64}));
  EXPECT_EQ(file.info("embed_out.weight").shape, (Shape{256, 64}));
  EXPECT_EQ(file.tensors().size(), 1u + 2 * 12 + 2 + 1);
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "GPTNeoXForCausalLM");
  EXPECT_EQ(hf["model_type"], "gpt_neox");
  EXPECT_EQ(hf["hidden_act"], "gelu");
  EXPECT_EQ(hf["rotary_pct"], 0.25);
  EXPECT_EQ(hf["rotary_emb_base"], 10000.0);
  EXPECT_EQ(hf["use_parallel_residual"], true);
  EXPECT_EQ(hf["tie_word_embeddings"], false);
  EXPECT_EQ(hf["intermediate_size"], 256);
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(read_hf_config(dir)), "gpt-neox");

  // Head h's q, k and v rows follow one another; a q/k head's first 4 channels are the ones Tessera turns
  // (its last 4), the v head's in order. Bias rows alike.
  const std::vector<float> qkv = file.read_f32("gpt_neox.layers.1.attention.query_key_value.weight");
  const std::vector<float> bias = file.read_f32("gpt_neox.layers.1.attention.query_key_value.bias");
  const Tensor& ours = testing::param_named(model, "layers.1.self_attn.qkv_proj.weight");
  const Tensor& ours_bias = testing::param_named(model, "layers.1.self_attn.qkv_proj.bias");
  const int64_t C = 64, HS = 16, R = 4;
  for (int64_t hf_row = 0; hf_row < 3 * C; ++hf_row) {
    const int64_t head = hf_row / (3 * HS), part = hf_row / HS % 3, d = hf_row % HS;
    const int64_t channel = part == 2 ? d : d < R ? HS - R + d : d - R;
    const int64_t row = part * C + head * HS + channel;
    ASSERT_EQ(bias[size_t(hf_row)], ours_bias.f32()[row]) << hf_row;
    for (int64_t col = 0; col < C; col += 13)
      ASSERT_EQ(qkv[size_t(hf_row * C + col)], ours.f32()[row * C + col]) << hf_row << " " << col;
  }
  Decoder imported(config);
  load_hf_model(dir, config, imported.named_params());
  expect_same_bits(model, imported);
}

// Sequential blocks (use_parallel_residual false), a tied head, RoPE on every channel: read back as the
// same config, every bit kept; exported again, byte for byte the same files.
TEST(HfGptNeox, SequentialTiedAndFullRotaryRoundTrip) {
  ModelConfig config = model_preset("pythia-tiny");
  config.parallel_residual = false;
  config.tied_embeddings = true;
  config.rotary_dims = 0;
  const Decoder model = testing::random_hf_model(config, 5);
  const fs::path dir = testing::scratch_dir();
  save_hf_model(dir / "a", config, model.named_params());
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "a" / "config.json"));
  EXPECT_EQ(hf["use_parallel_residual"], false);
  EXPECT_EQ(hf["tie_word_embeddings"], true);
  EXPECT_EQ(hf["rotary_pct"], 1.0);
  EXPECT_FALSE(SafetensorsFile(dir / "a" / "model.safetensors").contains("embed_out.weight"));
  EXPECT_TRUE(read_hf_config(dir / "a") == config);
  EXPECT_EQ(model_family(config), "gpt-neox");
  Decoder imported(config);
  load_hf_model(dir / "a", config, imported.named_params());
  expect_same_bits(model, imported);
  save_hf_model(dir / "b", config, imported.named_params());
  EXPECT_EQ(testing::read_text(dir / "a" / "model.safetensors"), testing::read_text(dir / "b" / "model.safetensors"));
}

// Pythia's own files: RoPE's base under rotary_emb_base, transformers 5's partial_rotary_factor in place of
// rotary_pct, and the buffers older checkpoints keep (the causal mask, its fill value, inverse frequencies)
// beside the weights; a tensor of another model is refused by name.
TEST(HfGptNeox, PythiaFilesAsReleased) {
  const ModelConfig config = model_preset("pythia-tiny");
  const Decoder model = testing::random_hf_model(config, 7);
  const fs::path dir = testing::scratch_dir();
  save_hf_model(dir, config, model.named_params());
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  hf.erase("rope_theta");
  hf["rotary_emb_base"] = 5000;
  hf.erase("rotary_pct");
  hf["partial_rotary_factor"] = 0.5;
  testing::write_text(dir / "config.json", hf.dump());
  const ModelConfig read = read_hf_config(dir);
  EXPECT_EQ(read.rope.theta, 5000.0f);
  EXPECT_EQ(read.rotary_dims, 8);

  // The weights again with the old buffers beside them.
  const SafetensorsFile file(dir / "model.safetensors");
  std::vector<SafetensorsEntry> entries;
  std::vector<std::vector<float>> values;
  for (const SafetensorsInfo& t : file.tensors()) values.push_back(file.read_f32(t.name));
  for (size_t i = 0; i < file.tensors().size(); ++i)
    entries.push_back({file.tensors()[i].name, DType::f32, file.tensors()[i].shape, values[i].data()});
  const std::vector<float> mask(64 * 64, 1.0f), fill = {-1e9f}, inv_freq(2, 0.5f);
  entries.push_back({"gpt_neox.layers.0.attention.bias", DType::f32, {1, 1, 64, 64}, mask.data()});
  entries.push_back({"gpt_neox.layers.0.attention.masked_bias", DType::f32, {}, fill.data()});
  entries.push_back({"gpt_neox.layers.0.attention.rotary_emb.inv_freq", DType::f32, {2}, inv_freq.data()});
  write_safetensors(dir / "model.safetensors", entries);
  Decoder imported(config);
  load_hf_model(dir, config, imported.named_params());
  expect_same_bits(model, imported);

  entries.push_back({"gpt_neox.layers.0.mlp.gate_proj.weight", DType::f32, {2}, inv_freq.data()});
  write_safetensors(dir / "model.safetensors", entries);
  const std::string message = testing::error_of([&] { load_hf_model(dir, config, imported.named_params()); });
  EXPECT_TRUE(testing::contains(message, "unexpected tensor 'gpt_neox.layers.0.mlp.gate_proj.weight' for a gpt-neox"))
      << message;
}

// What Tessera's GPT-NeoX does not compute is refused naming the field: another activation, no attention
// biases, RoPE scaling, a rotary share that turns an odd number of channels.
TEST(HfGptNeox, RefusedConfigsNameTheField) {
  const ModelConfig config = model_preset("pythia-tiny");
  const fs::path dir = testing::scratch_dir();
  save_hf_model(dir, config, testing::random_hf_model(config, 9).named_params());
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  const auto refused = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json changed = hf;
    changed[key] = value;
    testing::write_text(dir / "config.json", changed.dump());
    const std::string message = testing::error_of([&] { read_hf_config(dir); });
    EXPECT_TRUE(testing::contains(message, "field '" + key + "'")) << key << ": " << message;
  };
  refused("hidden_act", "relu");
  refused("attention_bias", false);
  refused("rope_scaling", nlohmann::json{{"type", "linear"}, {"factor", 2.0}});
  refused("rotary_pct", 0.1);  // one of a head's 16 channels
}

// GPT-NeoX-20B's hidden_act gelu_fast is GELU's tanh form, written back as such; with sequential blocks that
// form is StarCoder2's computation, not exported as GPT-NeoX.
TEST(HfGptNeox, GptNeox20bTanhGelu) {
  ModelConfig config = model_preset("pythia-tiny");
  config.mlp = MlpKind::gelu;
  const fs::path dir = testing::scratch_dir();
  const Decoder model = testing::random_hf_model(config, 11);
  save_hf_model(dir, config, model.named_params());
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["hidden_act"], "gelu_fast");
  EXPECT_TRUE(read_hf_config(dir) == config);
  for (const char* act : {"gelu_new", "gelu_pytorch_tanh"}) {
    hf["hidden_act"] = act;
    testing::write_text(dir / "config.json", hf.dump());
    EXPECT_EQ(read_hf_config(dir).mlp, MlpKind::gelu) << act;
  }
  Decoder imported(config);
  load_hf_model(dir, config, imported.named_params());
  expect_same_bits(model, imported);
  EXPECT_EQ(model_preset("gpt-neox-20b").mlp, MlpKind::gelu);
  EXPECT_EQ(gpu_unsupported(model_preset("gpt-neox-20b")), "");
  config.parallel_residual = false;
  EXPECT_FALSE(has_hf_gpt_neox_form(config));
}

// The exported model's family has no other form: the Llama exporter refuses it rather than writing
// Starcoder2's names, and a GPU plan notes that its GELU runs on the CPU only.
TEST(HfGptNeox, OnlyItsOwnForm) {
  const ModelConfig config = model_preset("pythia-tiny");
  EXPECT_TRUE(has_hf_gpt_neox_form(config));
  EXPECT_FALSE(has_hf_gpt_neox_form(model_preset("starcoder2-tiny")));
  EXPECT_EQ(gpu_unsupported(config), "gpt-neox takes GELU's exact (erf) form in its MLP, which no GPU kernel does yet");
}

}  // namespace
}  // namespace tessera
