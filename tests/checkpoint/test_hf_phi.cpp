// Phi-1.5 / Phi-2 <-> Hugging Face folders: the names, shapes and config.json transformers' PhiForCausalLM
// reads, lm_head's bias, the first R rows of each q/k head moved where Tessera's RoPE turns them, every bit kept
// both ways, and what Tessera does not compute refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_gpt_neox.h"
#include "checkpoint/hf_model.h"
#include "checkpoint/hf_phi.h"
#include "checkpoint/hf_test_models.h"
#include "checkpoint/safetensors.h"
#include "nn/model_presets.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;


TEST(HfPhi, NamesConfigRotaryRowsAndHeadBias) {
  const ModelConfig config = model_preset("phi2-tiny");  // 2 heads of 16, RoPE on 8 of them
  const Decoder model = testing::random_hf_model(config, 5);
  const fs::path dir = testing::scratch_dir();
  save_hf_model(dir, config, model.named_params());
  const SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.input_layernorm.bias").shape, (Shape{32}));
  EXPECT_FALSE(file.contains("model.layers.1.post_attention_layernorm.weight"));
  EXPECT_EQ(file.info("model.layers.1.self_attn.q_proj.bias").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.dense.weight").shape, (Shape{32, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.fc1.weight").shape, (Shape{128, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.fc2.bias").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.final_layernorm.bias").shape, (Shape{32}));
  EXPECT_EQ(file.info("lm_head.weight").shape, (Shape{256, 32}));
  EXPECT_EQ(file.info("lm_head.bias").shape, (Shape{256}));
  EXPECT_EQ(file.tensors().size(), 1u + 2 * 14 + 2 + 2);
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "PhiForCausalLM");
  EXPECT_EQ(hf["model_type"], "phi");
  EXPECT_EQ(hf["hidden_act"], "gelu_new");
  EXPECT_EQ(hf["partial_rotary_factor"], 0.5);
  EXPECT_EQ(hf["tie_word_embeddings"], false);
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "phi");
  EXPECT_FALSE(has_hf_gpt_neox_form(config));

  // A q head's first 8 rows (and bias entries) are the ones Tessera turns, its last 8.
  const std::vector<float> q = file.read_f32("model.layers.1.self_attn.q_proj.weight");
  const std::vector<float> q_bias = file.read_f32("model.layers.1.self_attn.q_proj.bias");
  const Tensor& ours = testing::param_named(model, "layers.1.self_attn.qkv_proj.weight");
  const Tensor& ours_bias = testing::param_named(model, "layers.1.self_attn.qkv_proj.bias");
  const int64_t C = 32, HS = 16, R = 8;
  for (int64_t row = 0; row < 2 * HS; ++row) {
    const int64_t d = row % HS, ours_row = row / HS * HS + (d < R ? HS - R + d : d - R);
    ASSERT_EQ(q_bias[size_t(row)], ours_bias.f32()[ours_row]) << row;
    for (int64_t col = 0; col < C; col += 5) ASSERT_EQ(q[size_t(row * C + col)], ours.f32()[ours_row * C + col]);
  }
  EXPECT_EQ(file.read_f32("lm_head.bias")[17], testing::param_named(model, "lm_head.bias").f32()[17]);
  Decoder imported(config);
  load_hf_model(dir, config, imported.named_params());
  testing::expect_same_bits(model, imported);

  // Refused by field: q/k layernorms, RoPE scaling, a tied head, another activation.
  const auto refused = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json changed = hf;
    changed[key] = value;
    testing::write_text(dir / "config.json", changed.dump());
    const std::string message = testing::error_of([&] { read_hf_config(dir); });
    EXPECT_TRUE(testing::contains(message, "field '" + key + "'")) << key << ": " << message;
  };
  refused("qk_layernorm", true);
  refused("rope_scaling", nlohmann::json{{"type", "linear"}, {"factor", 2.0}});
  refused("tie_word_embeddings", true);
  refused("hidden_act", "relu");
}

// Phi-1.5 and Phi-2 as released: 0.5 and 0.4 of each head rotating; the published parameter counts.
TEST(HfPhi, PresetsAndPartialRotary) {
  EXPECT_EQ(model_preset("phi-2").rotary_dims, 32);  // int(80 * 0.4)
  EXPECT_EQ(model_preset("phi-1.5").rotary_dims, 32);  // int(64 * 0.5)
  EXPECT_EQ(model_preset("phi-2").num_parameters(), 2779683840);
  EXPECT_EQ(gpu_unsupported(model_preset("phi-2")), "");
}

}  // namespace
}  // namespace tessera
