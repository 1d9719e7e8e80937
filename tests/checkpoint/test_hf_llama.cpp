// Llama and Mixtral <-> Hugging Face folders: export and import keep every tensor bit for bit, in
// one file or sharded with an index; the HF names and shapes are the ones transformers writes.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "checkpoint/hf_llama.h"
#include "checkpoint/hf_source.h"
#include "checkpoint/hf_model.h"
#include "checkpoint/safetensors.h"
#include "core/rng.h"
#include "nn/decoder.h"
#include "nn/model_presets.h"
#include "support/test_support.h"

namespace tessera {
namespace {

void randomise(Decoder& model, uint64_t seed) {
  const ModelConfig& c = model.config();
  // Gemma's files hold each gain less 1: gains within [0.5, 2] make that subtraction, and the import's
  // addition, exact (Sterbenz), as trained gains near 1 are.
  const bool offset_gains = c.scaled_embeddings;  // Gemma's (1 + w) norms
  for (NamedTensor& p : model.named_params()) {
    const bool gain = offset_gains && p.name.ends_with("norm.weight");
    for (int64_t i = 0; i < p.tensor.numel(); ++i) {
      const float v = normal_at(seed, stream_id(p.name), uint64_t(i));
      p.tensor.f32()[i] = gain ? 1.0f + 0.4f * std::tanh(v) : v;
    }
    if (p.name == "embed_tokens.weight" || p.name == "lm_head.weight")
      for (int64_t i = c.vocab_size * c.channels; i < p.tensor.numel(); ++i) p.tensor.f32()[i] = 0.0f;
  }
}

void expect_same_bits(const Decoder& a, const Decoder& b) {
  ASSERT_EQ(a.params().numel(), b.params().numel());
  for (int64_t i = 0; i < a.params().numel(); ++i)
    ASSERT_EQ(a.params().f32()[i], b.params().f32()[i]) << "element " << i;
}

class HfLlama : public ::testing::TestWithParam<std::string> {};

TEST_P(HfLlama, ExportImportExportKeepsEveryBit) {
  const ModelConfig config = model_preset(GetParam());
  Decoder original(config);
  randomise(original, 4);
  const auto dir = testing::scratch_dir();
  save_hf_llama(dir / "one", config, original.named_params());
  save_hf_llama(dir / "sharded", config, original.named_params(), 20000);  // bytes per shard: several shards
  EXPECT_TRUE(std::filesystem::exists(dir / "one" / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir / "sharded" / "model.safetensors"));
  const nlohmann::json index =
      nlohmann::json::parse(testing::read_text(dir / "sharded" / "model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  EXPECT_GT(shards.size(), 2u);

  for (const char* folder : {"one", "sharded"}) {
    const ModelConfig read = read_hf_config(dir / folder);
    EXPECT_TRUE(read == config) << folder;
    Decoder imported(read);
    load_hf_model(dir / folder, read, imported.named_params());
    expect_same_bits(original, imported);
    save_hf_model(dir / (std::string(folder) + "-again"), read, imported.named_params());
    EXPECT_EQ(testing::read_text(dir / (std::string(folder) + "-again") / "model.safetensors"),
              testing::read_text(dir / "one" / "model.safetensors"));
  }
}

// An export from values (a checkpoint's) reads each file's tensors only as that file is written:
// every read for a shard's tensors happens while exactly the shards before it exist, so an export
// holds one shard, never the whole model.
TEST(HfLlama, ExportReadsEachShardsTensorsAsItWritesIt) {
  const ModelConfig config = model_preset("mixtral-tiny");
  Decoder original(config);
  randomise(original, 5);
  const auto dir = testing::scratch_dir();
  const ParameterValues values = values_of_named(original.layout(), original.named_params(), "test");
  std::vector<std::pair<int64_t, int>> reads;  // (flat offset read, shard files on disk then)
  const ParameterValues watched = [&](OffsetRange range, float* out) {
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir / "hf"))
      files += e.path().filename().string().starts_with("model-");
    reads.emplace_back(range.begin, files);
    values(range, out);
  };
  save_hf_llama(dir / "hf", config, watched, 20000);
  const nlohmann::json index = nlohmann::json::parse(testing::read_text(dir / "hf" / "model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  ASSERT_GT(shards.size(), 2u);
  ASSERT_FALSE(reads.empty());
  for (size_t i = 1; i < reads.size(); ++i) EXPECT_GE(reads[i].second, reads[i - 1].second);
  EXPECT_EQ(reads.front().second, 0);
  EXPECT_EQ(reads.back().second, int(shards.size()) - 1);
  Decoder imported(config);
  load_hf_model(dir / "hf", config, imported.named_params());
  expect_same_bits(original, imported);
}

// dir's config.json rewritten from `hf` with `key` set to `value`: reading it is refused naming the field.
void expect_field_refused(const std::filesystem::path& dir, nlohmann::json hf, const std::string& key,
                          const nlohmann::json& value) {
  hf[key] = value;
  testing::write_text(dir / "config.json", hf.dump());
  const std::string message = testing::error_of([&] { read_hf_config(dir); });
  EXPECT_TRUE(testing::contains(message, std::string("field '").append(key).append("'"))) << message;
}

// `preset`'s freshly initialised model saved as a Hugging Face folder in `dir`; its config.
ModelConfig save_preset(const std::string& preset, const std::filesystem::path& dir) {
  const ModelConfig config = model_preset(preset);
  Decoder model(config);
  save_hf_llama(dir, config, model.named_params());
  return config;
}

INSTANTIATE_TEST_SUITE_P(Families, HfLlama,
                         ::testing::Values("llama-tiny", "qwen2-tiny", "qwen2-moe-tiny", "qwen3-tiny", "qwen3-moe-tiny",
                                           "mixtral-tiny", "phi3-tiny", "olmo2-tiny", "olmoe-tiny", "smollm3-tiny",
                                           "gemma-tiny", "gemma2-tiny", "gemma3-tiny", "starcoder2-tiny", "cohere-tiny",
                                           "cohere2-tiny", "glm4.5-tiny", "deepseek-v2-tiny", "deepseek-v3-tiny"),
                         [](const auto& info) {
                           return info.param == "llama-tiny"       ? "Llama"
                                  : info.param == "phi3-tiny"      ? "Phi3"
                                  : info.param == "olmo2-tiny"     ? "Olmo2"
                                  : info.param == "olmoe-tiny"     ? "Olmoe"
                                  : info.param == "smollm3-tiny"   ? "SmolLM3"
                                  : info.param == "gemma-tiny"     ? "Gemma"
                                  : info.param == "gemma2-tiny"    ? "Gemma2"
                                  : info.param == "gemma3-tiny"    ? "Gemma3"
                                  : info.param == "starcoder2-tiny" ? "Starcoder2"
                                  : info.param == "cohere-tiny"    ? "Cohere"
                                  : info.param == "cohere2-tiny"   ? "Cohere2"
                                  : info.param == "qwen2-tiny"     ? "Qwen2"
                                  : info.param == "qwen2-moe-tiny" ? "Qwen2Moe"
                                  : info.param == "qwen3-tiny"     ? "Qwen3"
                                  : info.param == "qwen3-moe-tiny" ? "Qwen3Moe"
                                  : info.param == "mixtral-tiny"   ? "Mixtral"
                                  : info.param == "glm4.5-tiny"    ? "Glm4Moe"
                                  : info.param == "deepseek-v2-tiny" ? "DeepSeekV2"
                                                                   : "DeepSeekV3";
                         });

// DeepSeek-V3: transformers' latent attention and MoE names, its config keys, the RoPE tails written
// interleaved (HF row kv_rank + 2j is our row kv_rank + j, row kv_rank + 2j + 1 our kv_rank + R/2 + j),
// and what Tessera does not run refused naming the key (a rope_scaling other than YaRN or llama3 among
// them).
TEST(HfLlama, DeepSeekV3NamesConfigAndRopeOrder) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = model_preset("deepseek-v3-tiny");
  Decoder model(config);
  randomise(model, 9);
  save_hf_llama(dir, config, model.named_params());
  SafetensorsFile file(dir / "model.safetensors");
  const std::string a = "model.layers.1.self_attn.", m = "model.layers.1.mlp.";
  EXPECT_EQ(file.info(a + "q_a_proj.weight").shape, (Shape{12, 32}));
  EXPECT_EQ(file.info(a + "q_a_layernorm.weight").shape, (Shape{12}));
  EXPECT_EQ(file.info(a + "q_b_proj.weight").shape, (Shape{48, 12}));
  EXPECT_EQ(file.info(a + "kv_a_proj_with_mqa.weight").shape, (Shape{20, 32}));
  EXPECT_EQ(file.info(a + "kv_a_layernorm.weight").shape, (Shape{16}));
  EXPECT_EQ(file.info(a + "kv_b_proj.weight").shape, (Shape{56, 16}));
  EXPECT_EQ(file.info(a + "o_proj.weight").shape, (Shape{32, 24}));
  EXPECT_EQ(file.info(m + "gate.weight").shape, (Shape{8, 32}));
  EXPECT_EQ(file.info(m + "gate.e_score_correction_bias").shape, (Shape{8}));
  EXPECT_EQ(file.info(m + "experts.7.down_proj.weight").shape, (Shape{32, 16}));
  EXPECT_EQ(file.info(m + "shared_experts.gate_proj.weight").shape, (Shape{16, 32}));
  EXPECT_EQ(file.info("model.layers.0.mlp.gate_proj.weight").shape, (Shape{64, 32}));
  EXPECT_FALSE(file.contains(a + "q_proj.weight"));

  const std::vector<float> theirs = file.read_f32(a + "kv_a_proj_with_mqa.weight");
  const Tensor& ours = model.named_params()[model.layout().index_of("layers.1.self_attn.kv_a_proj_with_mqa.weight")].tensor;
  const int64_t C = 32, rank = 16, R = 4;
  for (int64_t j = 0; j < R / 2; ++j)
    for (int64_t col = 0; col < C; ++col) {
      EXPECT_EQ(theirs[size_t((rank + 2 * j) * C + col)], ours.f32()[(rank + j) * C + col]);
      EXPECT_EQ(theirs[size_t((rank + 2 * j + 1) * C + col)], ours.f32()[(rank + R / 2 + j) * C + col]);
    }
  EXPECT_EQ(theirs[0], ours.f32()[0]);  // the latent's rows as they are

  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "DeepseekV3ForCausalLM");
  EXPECT_EQ(hf["model_type"], "deepseek_v3");
  EXPECT_EQ(hf["q_lora_rank"], 12);
  EXPECT_EQ(hf["kv_lora_rank"], 16);
  EXPECT_EQ(hf["qk_nope_head_dim"], 8);
  EXPECT_EQ(hf["qk_rope_head_dim"], 4);
  EXPECT_EQ(hf["v_head_dim"], 6);
  EXPECT_EQ(hf["n_routed_experts"], 8);
  EXPECT_EQ(hf["n_shared_experts"], 1);
  EXPECT_EQ(hf["first_k_dense_replace"], 1);
  EXPECT_EQ(hf["routed_scaling_factor"], 2.5);
  EXPECT_EQ(hf["n_group"], 4);
  EXPECT_EQ(hf["topk_group"], 2);
  EXPECT_EQ(hf["rope_interleave"], true);
  EXPECT_TRUE(read_hf_config(dir) == config);
  nlohmann::json unrenormalised = hf;
  unrenormalised["norm_topk_prob"] = false;
  testing::write_text(dir / "config.json", unrenormalised.dump());
  EXPECT_FALSE(read_hf_config(dir).moe.renormalize);
  EXPECT_EQ(read_hf_config(dir).moe.routed_scale, 2.5f);  // V3 scales either way
  for (const auto& [key, value] :
       {std::pair<std::string, nlohmann::json>{"rope_scaling", {{"type", "dynamic"}, {"factor", 40}}},
        {"scoring_func", "softmax"},
        {"attention_bias", true},
        {"num_key_value_heads", 2},
        {"v_head_dim", 16}}) {
    nlohmann::json other = hf;
    other[key] = value;
    testing::write_text(dir / "config.json", other.dump());
    const std::string message = testing::error_of([&] { read_hf_config(dir); });
    EXPECT_TRUE(testing::contains(message, key == "v_head_dim" ? "v_dim" : key)) << key << ": " << message;
  }
}

// Qwen3-MoE: the router and experts under "mlp" with the dense MLP's names, its model type and keys.
TEST(HfLlama, Qwen3MoeNamesAndConfig) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("qwen3-moe-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.mlp.gate.weight").shape, (Shape{8, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.experts.7.gate_proj.weight").shape, (Shape{24, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.experts.7.up_proj.weight").shape, (Shape{24, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.experts.7.down_proj.weight").shape, (Shape{32, 24}));
  EXPECT_EQ(file.info("model.layers.0.self_attn.q_norm.weight").shape, (Shape{16}));
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Qwen3MoeForCausalLM");
  EXPECT_EQ(hf["model_type"], "qwen3_moe");
  EXPECT_EQ(hf["num_experts"], 8);
  EXPECT_EQ(hf["moe_intermediate_size"], 24);
  EXPECT_EQ(hf["norm_topk_prob"], true);
  EXPECT_TRUE(read_hf_config(dir) == config);
  // Weights left unrenormalised (norm_topk_prob false) read as such.
  nlohmann::json unrenormalised = hf;
  unrenormalised["norm_topk_prob"] = false;
  testing::write_text(dir / "config.json", unrenormalised.dump());
  EXPECT_FALSE(read_hf_config(dir).moe.renormalize);
  // Layouts Tessera does not run are refused naming the key: dense layers between MoE layers.
  for (const auto& [key, value] : {std::pair<std::string, nlohmann::json>{"decoder_sparse_step", 2},
                                   {"mlp_only_layers", nlohmann::json::array({0})}}) {
    nlohmann::json other = hf;
    other[key] = value;
    testing::write_text(dir / "config.json", other.dump());
    const std::string message = testing::error_of([&] { read_hf_config(dir); });
    EXPECT_TRUE(testing::contains(message, "field '" + key + "'")) << message;
  }
}

// Qwen3: transformers' q_norm and k_norm (HS each), heads of head_dim wider than hidden_size / heads
// (q_proj (NH·HS, C), o_proj (C, NH·HS)), its model type; read back as the same config.
TEST(HfLlama, Qwen3HeadNormsAndWideHeads) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("qwen3-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.self_attn.q_norm.weight").shape, (Shape{16}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_norm.weight").shape, (Shape{16}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.q_proj.weight").shape, (Shape{64, 32}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_proj.weight").shape, (Shape{32, 32}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.o_proj.weight").shape, (Shape{32, 64}));
  EXPECT_FALSE(file.contains("model.layers.1.self_attn.q_proj.bias"));
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(hf["model_type"], "qwen3");
  EXPECT_EQ(hf["head_dim"], 16);
  EXPECT_EQ(hf["attention_bias"], false);
  EXPECT_TRUE(read_hf_config(dir) == config);
  // A Qwen3 whose heads are hidden_size / heads wide reads as the preset of that shape.
  const ModelConfig small = model_preset("qwen3-1.7b");
  EXPECT_EQ(small.head_dim, 0);
  EXPECT_EQ(small.head_size(), 128);
}

// transformers 5 writes RoPE as one rope_parameters dict (theta, type and scaling, Phi-3's partial
// rotary factor and original length too) with no top-level rope_theta: read as the older form is, so
// Llama 3.2's scaled RoPE and Phi-4-mini's LongRoPE come back whole, never the default theta. A dict
// per layer type (but Gemma 3's two) and a theta given two ways that disagree are refused, naming the field.
TEST(HfLlama, RopeParametersOfTransformers5ReadAsTheOlderFields) {
  for (const char* preset : {"llama3.2-1b", "phi3-tiny"}) {
    SCOPED_TRACE(preset);
    const auto dir = testing::scratch_dir() / preset;
    ModelConfig config = model_preset(preset);
    config.num_layers = 1, config.vocab_size = 256, config.channels = 32, config.num_heads = 4, config.num_kv_heads = 2;
    config.mlp_hidden = 64;
    if (config.rope.longrope) config.rotary_dims = 6;
    save_hf_llama(dir, config, Decoder(config).named_params());
    nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
    nlohmann::json rope = hf["rope_scaling"];
    rope["rope_theta"] = hf["rope_theta"];
    hf.erase("rope_theta");
    hf.erase("rope_scaling");
    if (config.phi3) {
      for (const char* key : {"partial_rotary_factor", "original_max_position_embeddings"}) {
        rope[key] = hf[key];
        hf.erase(key);
      }
    }
    hf["rope_parameters"] = rope;
    testing::write_text(dir / "config.json", hf.dump());
    EXPECT_TRUE(read_hf_config(dir) == config);
    hf["rope_theta"] = 12345.0;
    testing::write_text(dir / "config.json", hf.dump());
    std::string message = testing::error_of([&] { read_hf_config(dir); });
    EXPECT_TRUE(testing::contains(message, "field 'rope_theta' is '12345.0' but rope_parameters' is")) << message;
    hf.erase("rope_theta");
    hf["rope_parameters"] = {{"full_attention", rope}, {"linear_attention", {{"rope_theta", 10000.0}}}};
    testing::write_text(dir / "config.json", hf.dump());
    message = testing::error_of([&] { read_hf_config(dir); });
    EXPECT_TRUE(testing::contains(message, "rope_parameters gives layers of type 'full_attention' a RoPE")) << message;
  }
}

// OLMo 2: no input_layernorm; post_attention_layernorm after attention and post_feedforward_layernorm
// after the MLP; q_norm and k_norm over all heads (NH·HS and NKV·HS gains); read back as the same
// config. A windowed OLMo 2 has no such form; a sliding_window in an olmo2 config.json is ignored, as
// transformers ignores it.
TEST(HfLlama, Olmo2NormsAfterSublayersAndWholeHeadNorms) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("olmo2-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.self_attn.q_norm.weight").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_norm.weight").shape, (Shape{16}));
  EXPECT_EQ(file.info("model.layers.1.post_attention_layernorm.weight").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.1.post_feedforward_layernorm.weight").shape, (Shape{32}));
  EXPECT_FALSE(file.contains("model.layers.1.input_layernorm.weight"));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Olmo2ForCausalLM");
  EXPECT_EQ(hf["model_type"], "olmo2");
  EXPECT_EQ(hf["attention_bias"], false);
  EXPECT_FALSE(hf.contains("sliding_window"));
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "olmo2");
  hf["sliding_window"] = 8;
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_TRUE(read_hf_config(dir) == config);
  ModelConfig windowed = config;
  windowed.attention_window = 8;
  const std::string message =
      testing::error_of([&] { save_hf_llama(dir / "windowed", windowed, Decoder(windowed).named_params()); });
  EXPECT_TRUE(testing::contains(message, "no LlamaForCausalLM")) << message;
}

// StarCoder2: transformers' names for its biases (q, k, v and o_proj; each LayerNorm's), its GELU MLP
// (c_fc, c_proj), its config keys (norm_epsilon, use_bias, no dropout); read back as the same config.
// use_bias false and another activation are refused naming the key; dropouts are read, not applied.
TEST(HfLlama, Starcoder2BiasesLayerNormsAndConfig) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("starcoder2-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_proj.bias").shape, (Shape{16}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.o_proj.bias").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.c_fc.weight").shape, (Shape{64, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.c_fc.bias").shape, (Shape{64}));
  EXPECT_EQ(file.info("model.layers.1.mlp.c_proj.weight").shape, (Shape{32, 64}));
  EXPECT_EQ(file.info("model.layers.1.post_attention_layernorm.bias").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.norm.bias").shape, (Shape{32}));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Starcoder2ForCausalLM");
  EXPECT_EQ(hf["model_type"], "starcoder2");
  EXPECT_EQ(hf["hidden_act"], "gelu_pytorch_tanh");
  EXPECT_EQ(hf["use_bias"], true);
  EXPECT_EQ(hf["sliding_window"], 8);
  EXPECT_FALSE(hf.contains("rms_norm_eps"));
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "starcoder2");
  hf["residual_dropout"] = 0.1;  // StarCoder2-3B's
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_TRUE(read_hf_config(dir) == config);
  expect_field_refused(dir, hf, "use_bias", false);
  expect_field_refused(dir, hf, "hidden_act", "gelu");
}

// Cohere (Command-R, Aya): Llama's names with one norm a block (no post_attention_layernorm) and no norm biases,
// its config keys (layer_norm_eps, logit_scale), and q_proj/k_proj rows in its interleaved RoPE order: HF row
// 2i of a head is our row i, row 2i + 1 our i + HS/2. Command R+'s q/k norms and RoPE scaling are refused by name.
TEST(HfLlama, CohereNamesConfigAndRopePairs) {
  const ModelConfig config = model_preset("cohere-tiny");  // 4 heads of 8, 2 kv heads
  Decoder model(config);
  randomise(model, 13);
  const auto dir = testing::scratch_dir();
  save_hf_model(dir, config, model.named_params());
  const SafetensorsFile file(dir / "model.safetensors");
  EXPECT_TRUE(file.contains("model.layers.1.input_layernorm.weight"));
  EXPECT_FALSE(file.contains("model.layers.1.input_layernorm.bias"));
  EXPECT_FALSE(file.contains("model.layers.1.post_attention_layernorm.weight"));
  EXPECT_FALSE(file.contains("model.norm.bias"));
  EXPECT_FALSE(file.contains("lm_head.weight"));
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_proj.weight").shape, (Shape{16, 32}));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "CohereForCausalLM");
  EXPECT_EQ(hf["model_type"], "cohere");
  EXPECT_EQ(hf["logit_scale"], 0.25);
  EXPECT_EQ(hf["layer_norm_eps"], 1e-5);
  EXPECT_EQ(hf["use_qk_norm"], false);
  EXPECT_FALSE(hf.contains("rms_norm_eps"));
  EXPECT_FALSE(hf.contains("head_dim"));
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "cohere");

  const std::vector<float> k = file.read_f32("model.layers.1.self_attn.k_proj.weight");
  const auto named = std::find_if(model.named_params().begin(), model.named_params().end(),
                                  [](const NamedTensor& p) { return p.name == "layers.1.self_attn.qkv_proj.weight"; });
  ASSERT_NE(named, model.named_params().end());
  const int64_t C = 32, HS = 8, q_rows = 4 * HS;
  for (int64_t head = 0; head < 2; ++head)
    for (int64_t j = 0; j < HS; ++j) {
      const int64_t ours = q_rows + head * HS + (j % 2 == 0 ? j / 2 : HS / 2 + j / 2);
      for (int64_t col = 0; col < C; col += 7)
        ASSERT_EQ(k[size_t((head * HS + j) * C + col)], named->tensor.f32()[ours * C + col]) << head << " " << j;
    }
  Decoder imported(config);
  load_hf_model(dir, config, imported.named_params());
  expect_same_bits(model, imported);

  hf.erase("logit_scale");  // CohereConfig's default
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_EQ(read_hf_config(dir).logit_scale, 0.0625f);
  expect_field_refused(dir, hf, "use_qk_norm", true);
  expect_field_refused(dir, hf, "rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}});
}

// Cohere2 (Command R7B, Command A): Cohere's tensors, its blocks' kinds written both as layer_types and as
// sliding_window_pattern (transformers 4.5x reads the pattern), read back from either; its global blocks take
// no RoPE. Global blocks that are not every P-th have no Cohere2 form.
TEST(HfLlama, Cohere2WindowsAndBlocksWithoutRope) {
  const ModelConfig config = model_preset("cohere2-tiny");  // 3 blocks, window 8, block 1 global
  const auto dir = testing::scratch_dir();
  Decoder model(config);
  randomise(model, 17);
  save_hf_model(dir, config, model.named_params());
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Cohere2ForCausalLM");
  EXPECT_EQ(hf["model_type"], "cohere2");
  EXPECT_EQ(hf["sliding_window"], 8);
  EXPECT_EQ(hf["sliding_window_pattern"], 2);
  EXPECT_EQ(hf["layer_types"], nlohmann::json({"sliding_attention", "full_attention", "sliding_attention"}));
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "cohere2");
  Decoder imported(config);
  load_hf_model(dir, config, imported.named_params());
  expect_same_bits(model, imported);
  hf.erase("layer_types");  // the pattern alone, as older exports write it
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_TRUE(read_hf_config(dir) == config);
  hf.erase("sliding_window_pattern");  // Cohere2Config's 4: no global block among 3
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_TRUE(read_hf_config(dir).global_layers.empty());
  ModelConfig scattered = model_preset("cohere2-tiny");
  scattered.num_layers = 4, scattered.global_layers = scattered.nope_layers = {1, 2};
  EXPECT_TRUE(testing::contains(testing::error_of([&] { save_hf_model(dir, scattered, Decoder(scattered).named_params()); }),
                                "has no LlamaForCausalLM"));
}

// OLMoE: pre-norm blocks with q_norm and k_norm over all heads, Qwen3-MoE's router and experts under
// "mlp", the chosen experts' weights not renormalised; read back as the same config. A clip_qkv is
// refused, naming the field.
// Qwen2-MoE: Qwen2's q/k/v biases, the experts under "mlp", one shared expert two experts wide
// (shared_expert, singular) and its gate (1, C); weights not renormalised; read back as the same config. A
// shared width that is not whole experts', and Qwen2-MoE without biases, are refused naming the field.
TEST(HfLlama, Qwen2MoeNamesAndConfig) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("qwen2-moe-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.self_attn.q_proj.bias").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.gate.weight").shape, (Shape{8, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.experts.7.down_proj.weight").shape, (Shape{32, 16}));
  EXPECT_EQ(file.info("model.layers.1.mlp.shared_expert.gate_proj.weight").shape, (Shape{32, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.shared_expert.down_proj.weight").shape, (Shape{32, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.shared_expert_gate.weight").shape, (Shape{1, 32}));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Qwen2MoeForCausalLM");
  EXPECT_EQ(hf["model_type"], "qwen2_moe");
  EXPECT_EQ(hf["moe_intermediate_size"], 16);
  EXPECT_EQ(hf["shared_expert_intermediate_size"], 32);
  EXPECT_EQ(hf["norm_topk_prob"], false);
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "qwen2-moe");
  expect_field_refused(dir, hf, "shared_expert_intermediate_size", 40);
  expect_field_refused(dir, hf, "qkv_bias", false);
  expect_field_refused(dir, hf, "mlp_only_layers", nlohmann::json::array({0}));
}

TEST(HfLlama, OlmoeNamesAndConfig) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("olmoe-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.self_attn.q_norm.weight").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_norm.weight").shape, (Shape{16}));
  EXPECT_EQ(file.info("model.layers.1.input_layernorm.weight").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.gate.weight").shape, (Shape{8, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.experts.7.down_proj.weight").shape, (Shape{32, 24}));
  EXPECT_FALSE(file.contains("model.layers.1.post_feedforward_layernorm.weight"));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "OlmoeForCausalLM");
  EXPECT_EQ(hf["model_type"], "olmoe");
  EXPECT_EQ(hf["intermediate_size"], 24);
  EXPECT_EQ(hf["num_experts"], 8);
  EXPECT_EQ(hf["num_experts_per_tok"], 2);
  EXPECT_EQ(hf["norm_topk_prob"], false);
  EXPECT_TRUE(hf["clip_qkv"].is_null());
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "olmoe");
  hf["clip_qkv"] = 8.0;
  testing::write_text(dir / "config.json", hf.dump());
  const std::string message = testing::error_of([&] { read_hf_config(dir); });
  EXPECT_TRUE(testing::contains(message, "field 'clip_qkv'")) << message;
}

// SmolLM3: Llama's tensors; no_rope_layers a 1 for each block that takes RoPE, 0 for one that does not;
// read back as the same config. Without the list, every no_rope_layer_interval-th block (4 unless
// given) takes none, as transformers builds it; SmolLM3-3B's pretraining_tp 2 is accepted (its model
// never reads it); a list too short or not of 0s and 1s is refused, naming the field.
TEST(HfLlama, Smollm3BlocksWithoutRope) {
  const auto dir = testing::scratch_dir();
  ModelConfig config = model_preset("smollm3-tiny");
  config.num_layers = 5, config.nope_layers = {1, 4};
  save_hf_llama(dir, config, Decoder(config).named_params());
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "SmolLM3ForCausalLM");
  EXPECT_EQ(hf["model_type"], "smollm3");
  EXPECT_EQ(hf["no_rope_layers"], nlohmann::json::parse("[1, 0, 1, 1, 0]"));
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "smollm3");
  hf.erase("no_rope_layers");
  hf["pretraining_tp"] = 2;
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_EQ(read_hf_config(dir).nope_layers, (std::vector<int64_t>{3}));
  hf["no_rope_layer_interval"] = 2;
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_EQ(read_hf_config(dir).nope_layers, (std::vector<int64_t>{1, 3}));
  for (const char* bad : {"[1, 0, 1]", "[1, 0, 2, 1, 1]"}) {
    hf["no_rope_layers"] = nlohmann::json::parse(bad);
    testing::write_text(dir / "config.json", hf.dump());
    const std::string message = testing::error_of([&] { read_hf_config(dir); });
    EXPECT_TRUE(testing::contains(message, "field 'no_rope_layers' must hold a 0 (no RoPE) or 1 for each of the 5"))
        << message;
  }
}

// Gemma 3 (Gemma3ForCausalLM): its four norms a block (pre_feedforward_layernorm before the MLP), each
// gain stored less 1; layer_types naming its global blocks (or, without them, every
// sliding_window_pattern-th), rope_local_base_freq, query_pre_attn_scalar; transformers 5's RoPE per layer
// type folds into those; a capped-logit Gemma 2-style config or another activation is refused.
TEST(HfLlama, Gemma3NamesConfigAndGains) {
  const auto dir = testing::scratch_dir();
  ModelConfig config = model_preset("gemma3-tiny");
  config.attention_scalar = 24;
  Decoder model(config);
  model.init_weights(1);                            // gains of 1
  model.named_params()[1].tensor.f32()[0] = 1.25f;  // layers.0.input_layernorm.weight's first gain
  ASSERT_EQ(model.named_params()[1].name, "layers.0.input_layernorm.weight");
  save_hf_llama(dir, config, model.named_params());
  SafetensorsFile file(dir / "model.safetensors");
  for (const char* norm : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                           "post_feedforward_layernorm"})
    EXPECT_EQ(file.info("model.layers.2." + std::string(norm) + ".weight").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.2.self_attn.q_norm.weight").shape, (Shape{16}));
  EXPECT_EQ(file.read_f32("model.layers.0.input_layernorm.weight")[0], 0.25f);
  EXPECT_EQ(file.read_f32("model.layers.0.input_layernorm.weight")[1], 0.0f);  // a gain of 1
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Gemma3ForCausalLM");
  EXPECT_EQ(hf["model_type"], "gemma3_text");
  EXPECT_EQ(hf["layer_types"], nlohmann::json::parse(R"(["sliding_attention", "sliding_attention", "full_attention"])"));
  EXPECT_EQ(hf["sliding_window"], 8);
  EXPECT_EQ(hf["query_pre_attn_scalar"], 24.0);
  EXPECT_EQ(hf["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "gemma3");
  hf.erase("layer_types");
  hf["sliding_window_pattern"] = 2;
  hf["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"rope_theta", 1e6}, {"factor", 8.0}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1234.0}}}};
  hf.erase("rope_theta");
  hf.erase("rope_local_base_freq");
  hf.erase("rope_scaling");
  testing::write_text(dir / "config.json", hf.dump());
  const ModelConfig folded = read_hf_config(dir);
  EXPECT_EQ(folded.global_layers, (std::vector<int64_t>{1}));
  EXPECT_EQ(folded.local_rope_theta, 1234.0f);
  EXPECT_TRUE(folded.rope.linear);
  EXPECT_EQ(folded.rope.factor, 8.0f);
  expect_field_refused(dir, hf, "final_logit_softcapping", 30.0);
  expect_field_refused(dir, hf, "attn_logit_softcapping", 50.0);
  expect_field_refused(dir, hf, "hidden_activation", "gelu");
  expect_field_refused(dir, hf, "layer_types", nlohmann::json::parse(R"(["sliding_attention"])"));
}

// Gemma 2 (Gemma2ForCausalLM): Gemma 3's four norms a block and (1 + w) gains without q/k norms; every
// other block slides, the first does; the scores and logits soft-capped (Gemma2Config's 50 and 30 when
// the fields are absent, none when null); one RoPE base.
TEST(HfLlama, Gemma2NamesConfigAndCaps) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("gemma2-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.pre_feedforward_layernorm.weight").shape, (Shape{32}));
  EXPECT_FALSE(file.contains("model.layers.1.self_attn.q_norm.weight"));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Gemma2ForCausalLM");
  EXPECT_EQ(hf["model_type"], "gemma2");
  EXPECT_EQ(hf["layer_types"], nlohmann::json::parse(R"(["sliding_attention", "full_attention", "sliding_attention"])"));
  EXPECT_EQ(hf["attn_logit_softcapping"], 0.05);
  EXPECT_EQ(hf["final_logit_softcapping"], 1.0);
  EXPECT_EQ(hf["query_pre_attn_scalar"], 24.0);
  EXPECT_FALSE(hf.contains("rope_local_base_freq"));
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "gemma2");
  hf.erase("layer_types");
  hf.erase("attn_logit_softcapping");
  hf["final_logit_softcapping"] = nullptr;
  testing::write_text(dir / "config.json", hf.dump());
  const ModelConfig defaults = read_hf_config(dir);
  EXPECT_EQ(defaults.global_layers, (std::vector<int64_t>{1}));
  EXPECT_EQ(defaults.attention_softcap, 50.0f);
  EXPECT_EQ(defaults.logit_softcap, 0.0f);
  expect_field_refused(dir, hf, "attn_logit_softcapping", -1.0);
  expect_field_refused(dir, hf, "hidden_activation", "gelu");
}

// Gemma (1) (GemmaForCausalLM): two (1 + w) norms a block under Llama's names, no window or caps; a config
// without hidden_activation runs GELU's tanh form, as transformers does; another activation is refused.
TEST(HfLlama, GemmaNamesAndConfig) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("gemma-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.post_attention_layernorm.weight").shape, (Shape{32}));
  EXPECT_FALSE(file.contains("model.layers.1.pre_feedforward_layernorm.weight"));
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_proj.weight").shape, (Shape{16, 32}));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "GemmaForCausalLM");
  EXPECT_EQ(hf["model_type"], "gemma");
  EXPECT_FALSE(hf.contains("sliding_window"));
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "gemma");
  hf.erase("hidden_activation");
  hf["hidden_act"] = "gelu";  // the releases' field, which transformers does not read for Gemma
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_TRUE(read_hf_config(dir) == config);
  expect_field_refused(dir, hf, "hidden_activation", "gelu");
}

// Soft caps are Gemma 2's: another family with them has no Hugging Face form to export.
TEST(HfLlama, SoftCapsOutsideGemma2AreNotExported) {
  for (const char* preset : {"llama-tiny", "gemma3-tiny"}) {
    ModelConfig config = model_preset(preset);
    config.logit_softcap = 30.0f;
    Decoder model(config);
    const std::string message =
        testing::error_of([&] { save_hf_llama(testing::scratch_dir(), config, model.named_params()); });
    EXPECT_TRUE(testing::contains(message, "has no LlamaForCausalLM")) << preset << ": " << message;
  }
}

// Gemma 3 4B-27B's folders (Gemma3ForConditionalGeneration, model_type "gemma3"): the text model's
// config is text_config, written with only what differs from Gemma3TextConfig's defaults; its tensors sit
// under language_model.model. (transformers 4.50) or model.language_model. (4.52), beside the vision
// tower and projector, which are skipped. Both load as the text model's own folder does.
TEST(HfLlama, Gemma3MultimodalFoldersLoadTheirTextModel) {
  const auto dir = testing::scratch_dir();
  ModelConfig config = model_preset("gemma3-tiny");
  config.tied_embeddings = false;  // so both forms' lm_head names are read
  Decoder original(config);
  randomise(original, 5);
  save_hf_llama(dir / "text", config, original.named_params());
  const nlohmann::json text = nlohmann::json::parse(testing::read_text(dir / "text" / "config.json"));
  nlohmann::json text_config = text;
  for (const char* key : {"architectures", "rms_norm_eps", "rope_theta", "rope_local_base_freq", "hidden_activation",
                          "final_logit_softcapping", "attn_logit_softcapping", "use_bidirectional_attention"})
    text_config.erase(key);  // Gemma3TextConfig's defaults, which transformers leaves out
  text_config["tie_word_embeddings"] = false;
  const nlohmann::json multimodal = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                     {"model_type", "gemma3"},
                                     {"text_config", text_config},
                                     {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 16}}},
                                     {"mm_tokens_per_image", 256}};
  std::vector<std::vector<float>> values;
  std::vector<SafetensorsInfo> infos;
  {
    const SafetensorsFile file(dir / "text" / "model.safetensors");
    infos = file.tensors();
    for (const SafetensorsInfo& info : infos) values.push_back(file.read_f32(info.name));
  }
  const std::vector<float> vision(16 * 32, 0.25f);
  for (const auto& [form, model_prefix, head, vision_prefix] :
       {std::tuple{"4.50", "language_model.model.", "language_model.lm_head.weight", ""},
        {"4.52", "model.language_model.", "lm_head.weight", "model."}}) {
    SCOPED_TRACE(form);
    const auto folder = dir / form;
    std::filesystem::create_directories(folder);
    std::vector<SafetensorsEntry> entries;
    for (size_t i = 0; i < infos.size(); ++i) {
      const std::string& name = infos[i].name;
      const std::string stored = name == "lm_head.weight" ? head : model_prefix + name.substr(6);
      entries.push_back({stored, DType::f32, infos[i].shape, values[i].data()});
    }
    const std::string tower = std::string(vision_prefix) + "vision_tower.vision_model.post_layernorm.weight";
    const std::string projector = std::string(vision_prefix) + "multi_modal_projector.mm_input_projection_weight";
    entries.push_back({tower, DType::f32, {16}, vision.data()});
    entries.push_back({projector, DType::f32, {16, 32}, vision.data()});
    write_safetensors(folder / "model.safetensors", entries);
    testing::write_text(folder / "config.json", multimodal.dump());
    EXPECT_TRUE(read_hf_config(folder) == config);
    Decoder imported(read_hf_config(folder));
    load_hf_model(folder, imported.config(), imported.named_params());
    expect_same_bits(original, imported);

    entries.push_back({model_prefix + std::string("layers.9.mlp.up_proj.weight"), DType::f32, {16}, vision.data()});
    write_safetensors(folder / "model.safetensors", entries);
    const std::string message = testing::error_of([&] { load_hf_model(folder, config, imported.named_params()); });
    EXPECT_TRUE(testing::contains(message, "unexpected tensor '" + std::string(model_prefix) + "layers.9.")) << message;
  }
  nlohmann::json no_text = multimodal;
  no_text.erase("text_config");
  testing::write_text(dir / "4.50" / "config.json", no_text.dump());
  std::string message = testing::error_of([&] { read_hf_config(dir / "4.50"); });
  EXPECT_TRUE(testing::contains(message, "a \"gemma3\" config needs the \"text_config\" object")) << message;
  nlohmann::json vision_text = multimodal;
  vision_text["text_config"]["model_type"] = "siglip_text_model";
  testing::write_text(dir / "4.50" / "config.json", vision_text.dump());
  message = testing::error_of([&] { read_hf_config(dir / "4.50"); });
  EXPECT_TRUE(testing::contains(message, "text_config's field 'model_type' is '\"siglip_text_model\"'")) << message;
}

// Gemma3TextConfig's defaults stand for the sizes a config leaves out: Gemma 3 4B's text_config names
// only its width, MLP, depth, window and RoPE scaling.
TEST(HfLlama, Gemma3TextConfigDefaults) {
  const nlohmann::json text = {{"model_type", "gemma3_text"},
                               {"hidden_size", 2560},
                               {"intermediate_size", 10240},
                               {"num_hidden_layers", 34},
                               {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                               {"sliding_window", 1024}};
  const ModelConfig c = hf_llama_config(text, "config.json");
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.kv_heads(), 4);
  EXPECT_EQ(c.head_size(), 256);
  EXPECT_EQ(c.attention_scalar, 0.0f);  // query_pre_attn_scalar 256: the head size
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.global_layers, (std::vector<int64_t>{5, 11, 17, 23, 29}));
  EXPECT_EQ(c.attention_window, 1024);
  EXPECT_TRUE(c.rope.linear);
  EXPECT_EQ(c.rope.factor, 8.0f);
  EXPECT_EQ(c.num_parameters(), 3880263168 + 64 * 2560);  // 3.88B (and the vocabulary's padding to 262,272 rows)
}

// `preset` exported, its file given two prediction-layer tensors: they load past with
// num_nextn_predict_layers 1, and are refused without the key.
void expect_prediction_layers_skipped(const std::string& preset) {
  SCOPED_TRACE(preset);
  const auto dir = testing::scratch_dir();
  const ModelConfig config = model_preset(preset);
  Decoder original(config);
  randomise(original, 12);
  save_hf_llama(dir, config, original.named_params());
  std::vector<std::vector<float>> values;
  std::vector<SafetensorsEntry> entries;
  {
    const SafetensorsFile file(dir / "model.safetensors");
    values.reserve(file.tensors().size() + 2);
    for (const SafetensorsInfo& info : file.tensors()) {
      values.push_back(file.read_f32(info.name));
      entries.push_back({info.name, DType::f32, info.shape, values.back().data()});
    }
  }
  const std::vector<float> extra(32 * 64, 0.5f);
  entries.push_back({"model.layers.3.eh_proj.weight", DType::f32, {32, 64}, extra.data()});
  entries.push_back({"model.layers.3.enorm.weight", DType::f32, {32}, extra.data()});
  write_safetensors(dir / "model.safetensors", entries);
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["num_nextn_predict_layers"], 0);  // an export has none
  hf["num_nextn_predict_layers"] = 1;
  testing::write_text(dir / "config.json", hf.dump());
  Decoder imported(read_hf_config(dir));
  load_hf_model(dir, imported.config(), imported.named_params());
  expect_same_bits(original, imported);
  hf.erase("num_nextn_predict_layers");
  testing::write_text(dir / "config.json", hf.dump());
  const std::string message = testing::error_of([&] { load_hf_model(dir, config, imported.named_params()); });
  EXPECT_TRUE(testing::contains(message, "unexpected tensor 'model.layers.3.")) << message;
}

// DeepSeek-V3's and GLM-4.5's files may hold multi-token-prediction layers after the model's
// (model.layers.{L}..., num_nextn_predict_layers of them): skipped, the model loading as without them;
// without the key they are another model's tensors and refused.
TEST(HfLlama, PredictionLayersAreSkipped) {
  for (const char* preset : {"deepseek-v3-tiny", "glm4.5-tiny"}) expect_prediction_layers_skipped(preset);
}

// GLM-4.5 (Glm4MoeForCausalLM): q/k/v biases (attention_bias, o_proj without), per-head q/k norms
// (use_qk_norm), a head's first half rotating (partial_rotary_factor 0.5: its q/k rows, biases and norm gains
// moved on import), DeepSeek-V3's router (gate, e_score_correction_bias), one shared expert, a dense first
// block; read back as the same config, and GLM-4.5-Air's form (no q/k norms) too.
TEST(HfLlama, Glm4MoeNamesAndConfig) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("glm4.5-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.self_attn.q_proj.bias").shape, (Shape{64}));
  EXPECT_FALSE(file.contains("model.layers.1.self_attn.o_proj.bias"));
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_norm.weight").shape, (Shape{16}));
  EXPECT_EQ(file.info("model.layers.0.mlp.gate_proj.weight").shape, (Shape{48, 32}));
  EXPECT_EQ(file.info("model.layers.1.mlp.gate.e_score_correction_bias").shape, (Shape{8}));
  EXPECT_EQ(file.info("model.layers.2.mlp.experts.7.down_proj.weight").shape, (Shape{32, 16}));
  EXPECT_EQ(file.info("model.layers.2.mlp.shared_experts.up_proj.weight").shape, (Shape{16, 32}));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Glm4MoeForCausalLM");
  EXPECT_EQ(hf["model_type"], "glm4_moe");
  EXPECT_EQ(hf["partial_rotary_factor"], 0.5);
  EXPECT_EQ(hf["routed_scaling_factor"], 2.5);
  EXPECT_EQ(hf["first_k_dense_replace"], 1);
  EXPECT_EQ(hf["attention_bias"], true);
  EXPECT_EQ(hf["use_qk_norm"], true);
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "glm4-moe");
  hf["use_qk_norm"] = false;
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_FALSE(read_hf_config(dir).qk_norm);
  expect_field_refused(dir, hf, "hidden_act", "gelu");
  expect_field_refused(dir, hf, "partial_rotary_factor", 0.2);  // 3 of 16 channels: odd
}

// DeepSeek-V2: V3's names without the router's selection bias, softmax routing whose weights are scaled
// by routed_scaling_factor only when not renormalised, its groups; its model type and keys.
TEST(HfLlama, DeepSeekV2RouterAndConfig) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("deepseek-v2-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_TRUE(file.contains("model.layers.1.mlp.gate.weight"));
  EXPECT_FALSE(file.contains("model.layers.1.mlp.gate.e_score_correction_bias"));
  EXPECT_TRUE(file.contains("model.layers.1.self_attn.q_proj.weight"));
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "DeepseekV2ForCausalLM");
  EXPECT_EQ(hf["model_type"], "deepseek_v2");
  EXPECT_EQ(hf["scoring_func"], "softmax");
  EXPECT_EQ(hf["norm_topk_prob"], false);
  EXPECT_EQ(hf["routed_scaling_factor"], 1.5);
  EXPECT_FALSE(hf.contains("rope_interleave"));
  EXPECT_TRUE(read_hf_config(dir) == config);
  // Renormalised, DeepSeek-V2 does not scale: the factor is read as 1.
  hf["norm_topk_prob"] = true;
  testing::write_text(dir / "config.json", hf.dump());
  const ModelConfig renormalised = read_hf_config(dir);
  EXPECT_TRUE(renormalised.moe.renormalize);
  EXPECT_EQ(renormalised.moe.routed_scale, 1.0f);
  // Group-limited routing (DeepSeek-V2's group_limited_greedy) reads its groups; groups that do not
  // divide the experts are refused naming them.
  hf["topk_method"] = "group_limited_greedy", hf["n_group"] = 4, hf["topk_group"] = 3;
  testing::write_text(dir / "config.json", hf.dump());
  EXPECT_EQ(read_hf_config(dir).moe.groups, 4);
  EXPECT_EQ(read_hf_config(dir).moe.kept_groups, 3);
  hf["n_group"] = 3;
  testing::write_text(dir / "config.json", hf.dump());
  const std::string message = testing::error_of([&] { read_hf_config(dir); });
  EXPECT_TRUE(testing::contains(message, "moe groups (3) must divide the 8 experts")) << message;
  // A renormalising softmax router scaled by other than 1 has no DeepseekV2ForCausalLM form.
  ModelConfig scaled = config;
  scaled.moe.renormalize = true;
  EXPECT_THROW(save_hf_llama(dir / "scaled", scaled, Decoder(scaled).named_params()), Error);
}

// YaRN's rope_scaling (Qwen3's long-context configs, DeepSeek's) reads into the config and writes back
// as it was given: the magnitude terms only when present, original_max_position_embeddings defaulting
// to max_position_embeddings as transformers does.
TEST(HfLlama, YarnRopeScalingRoundTrips) {
  for (const char* preset : {"qwen3-tiny", "deepseek-v3-tiny"}) {
    SCOPED_TRACE(preset);
    const auto dir = testing::scratch_dir() / preset;
    ModelConfig config = model_preset(preset);
    config.rope.factor = 4, config.rope.yarn = true, config.rope.original_max_positions = 32768;
    if (config.mla.enabled()) config.rope.mscale = 0.707f, config.rope.mscale_all_dim = 0.707f;
    save_hf_llama(dir, config, Decoder(config).named_params());
    nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
    const nlohmann::json& scaling = hf["rope_scaling"];
    EXPECT_EQ(scaling["rope_type"], "yarn");
    EXPECT_EQ(scaling["factor"], 4.0);
    EXPECT_EQ(scaling["original_max_position_embeddings"], 32768);
    EXPECT_EQ(scaling["beta_fast"], 32.0);
    EXPECT_EQ(scaling.contains("mscale_all_dim"), config.mla.enabled());
    EXPECT_FALSE(scaling.contains("attention_factor"));
    EXPECT_TRUE(read_hf_config(dir) == config);
    hf["rope_scaling"].erase("original_max_position_embeddings");
    testing::write_text(dir / "config.json", hf.dump());
    EXPECT_EQ(read_hf_config(dir).rope.original_max_positions, config.max_seq_len);
  }
}

TEST(HfLlama, NamesAndShapesAreTransformers) {
  const auto dir = testing::scratch_dir();
  save_preset("mixtral-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.embed_tokens.weight").shape, (Shape{256, 32}));
  EXPECT_EQ(file.info("model.layers.0.self_attn.q_proj.weight").shape, (Shape{32, 32}));
  EXPECT_EQ(file.info("model.layers.0.self_attn.k_proj.weight").shape, (Shape{16, 32}));
  EXPECT_EQ(file.info("model.layers.1.block_sparse_moe.gate.weight").shape, (Shape{4, 32}));
  EXPECT_EQ(file.info("model.layers.1.block_sparse_moe.experts.3.w1.weight").shape, (Shape{48, 32}));
  EXPECT_EQ(file.info("model.layers.1.block_sparse_moe.experts.3.w2.weight").shape, (Shape{32, 48}));
  EXPECT_EQ(file.info("lm_head.weight").shape, (Shape{256, 32}));
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(hf["num_local_experts"], 4);
  EXPECT_EQ(hf["num_experts_per_tok"], 2);
  EXPECT_EQ(hf["num_key_value_heads"], 2);
  EXPECT_EQ(hf["output_router_logits"], false);  // HF's loss stays the language model's, as Mixtral ships it
}

// Float fields are written as their shortest decimal (1e-05, as transformers writes them), not the
// float widened to a double (9.999999747378752e-06), and read back to the same floats.
TEST(HfLlama, ConfigNumbersAreWrittenAsTheirShortestDecimal) {
  ModelConfig config = model_preset("llama-tiny");
  config.norm_eps = 1e-5f;
  config.rope = {500000.0f, 8.0f, 1.1f, 4.3f, 16};
  const auto dir = testing::scratch_dir();
  save_hf_llama(dir, config, Decoder(config).named_params());
  const std::string text = testing::read_text(dir / "config.json");
  EXPECT_TRUE(testing::contains(text, "\"rms_norm_eps\": 1e-05,")) << text;
  EXPECT_TRUE(testing::contains(text, "\"rope_theta\": 500000.0,")) << text;
  EXPECT_TRUE(testing::contains(text, "\"low_freq_factor\": 1.1,")) << text;
  EXPECT_TRUE(testing::contains(text, "\"high_freq_factor\": 4.3,")) << text;
  EXPECT_TRUE(read_hf_config(dir) == config);
}

// Qwen2 is Llama with q/k/v biases: transformers' names for them, its model type and no
// sliding window; Mistral's config reads as Llama's, a window shorter than its context becoming the
// model's attention_window and written back as MistralForCausalLM's sliding_window (and its
// use_sliding_window, a Qwen field, refused).
TEST(HfLlama, Qwen2BiasesAndMistralConfigs) {
  const auto dir = testing::scratch_dir();
  save_preset("qwen2-tiny", dir);
  SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.1.self_attn.q_proj.bias").shape, (Shape{32}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.k_proj.bias").shape, (Shape{16}));
  EXPECT_EQ(file.info("model.layers.1.self_attn.v_proj.bias").shape, (Shape{16}));
  EXPECT_FALSE(file.contains("model.layers.1.self_attn.o_proj.bias"));
  EXPECT_FALSE(file.contains("lm_head.weight"));  // tied
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(hf["model_type"], "qwen2");
  EXPECT_EQ(hf["use_sliding_window"], false);
  EXPECT_FALSE(hf.contains("attention_bias"));  // Llama's would put a bias on o_proj too

  nlohmann::json mistral = hf;
  mistral["model_type"] = "mistral";
  mistral.erase("use_sliding_window");
  mistral["sliding_window"] = nullptr;
  const ModelConfig read = hf_llama_config(mistral, "config.json");
  EXPECT_FALSE(read.qkv_bias);
  EXPECT_EQ(read.num_kv_heads, 2);
  auto error_for = [](const nlohmann::json& config) {
    return testing::error_of([&] { hf_llama_config(config, "config.json"); });
  };
  EXPECT_EQ(read.attention_window, 0);
  mistral["sliding_window"] = 16;  // shorter than max_position_embeddings (64)
  const ModelConfig windowed_mistral = hf_llama_config(mistral, "config.json");
  EXPECT_EQ(windowed_mistral.max_seq_len, 64);
  EXPECT_EQ(windowed_mistral.attention_window, 16);
  const nlohmann::json written = hf_llama_config_json(windowed_mistral);
  EXPECT_EQ(written["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(written["sliding_window"], 16);
  EXPECT_EQ(written["max_position_embeddings"], 64);
  mistral["sliding_window"] = 0;
  std::string message = error_for(mistral);
  EXPECT_TRUE(testing::contains(message, "field 'sliding_window' is '0', expected a positive number")) << message;
  mistral["sliding_window"] = nullptr;
  mistral["use_sliding_window"] = true;
  message = error_for(mistral);
  EXPECT_TRUE(testing::contains(message, "field 'use_sliding_window' is 'true', expected false")) << message;
  nlohmann::json llama_bias = hf;
  llama_bias["model_type"] = "llama";
  llama_bias["attention_bias"] = true;
  message = error_for(llama_bias);
  EXPECT_TRUE(testing::contains(message, "field 'attention_bias' is 'true', expected false")) << message;
}

// Qwen's windows as transformers builds its layer_types: with use_sliding_window the blocks from
// max_window_layers (28 by default) on slide, the first ones do not; layer_types, where given, names
// the kinds instead. No window without use_sliding_window, or one as long as the context; the export
// writes the same fields back. Qwen3-MoE's attention slides in every block.
TEST(HfLlama, QwenSlidingWindowsFromMaxWindowLayersOrLayerTypes) {
  ModelConfig moe = model_preset("qwen3-moe-tiny");
  nlohmann::json moe_hf = hf_llama_config_json(moe);
  moe_hf["use_sliding_window"] = true;
  moe_hf["sliding_window"] = 16;
  moe_hf["max_window_layers"] = 1;  // not read: transformers' Qwen3-MoE has no such layers
  const ModelConfig moe_read = hf_llama_config(moe_hf, "config.json");
  EXPECT_EQ(moe_read.attention_window, 16);
  EXPECT_TRUE(moe_read.global_layers.empty());
  EXPECT_EQ(hf_llama_config_json(moe_read)["max_window_layers"], 0);
  EXPECT_TRUE(hf_llama_config(hf_llama_config_json(moe_read), "config.json") == moe_read);
  moe.attention_window = 16;
  moe.global_layers = {0};
  const std::string moe_message = testing::error_of([&] { hf_llama_config_json(moe); });
  EXPECT_TRUE(testing::contains(moe_message, "cannot export a Qwen3-MoE model with blocks that do not slide"))
      << moe_message;
  for (const char* preset : {"qwen2-tiny", "qwen3-tiny"}) {
    SCOPED_TRACE(preset);
    ModelConfig base = model_preset(preset);
    base.num_layers = 4;
    nlohmann::json hf = hf_llama_config_json(base);
    EXPECT_EQ(hf["use_sliding_window"], false);
    EXPECT_FALSE(hf.contains("layer_types"));
    hf["use_sliding_window"] = true;
    hf["sliding_window"] = 16;
    hf["max_window_layers"] = 1;
    const ModelConfig read = hf_llama_config(hf, "config.json");
    EXPECT_EQ(read.attention_window, 16);
    EXPECT_EQ(read.global_layers, (std::vector<int64_t>{0}));
    EXPECT_FALSE(read.slides(0));
    EXPECT_TRUE(read.slides(3));
    const nlohmann::json written = hf_llama_config_json(read);
    EXPECT_EQ(written["use_sliding_window"], true);
    EXPECT_EQ(written["sliding_window"], 16);
    EXPECT_EQ(written["max_window_layers"], 1);
    EXPECT_EQ(written["layer_types"], nlohmann::json::parse(R"(["full_attention", "sliding_attention",
                                                                 "sliding_attention", "sliding_attention"])"));
    EXPECT_TRUE(hf_llama_config(written, "config.json") == read);
    const auto dir = testing::scratch_dir() / preset;  // and a whole folder, weights too
    save_hf_llama(dir, read, Decoder(read).named_params());
    EXPECT_TRUE(read_hf_config(dir) == read);

    nlohmann::json typed = hf;  // layer_types decides over max_window_layers
    typed["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
    const ModelConfig alternating = hf_llama_config(typed, "config.json");
    EXPECT_EQ(alternating.global_layers, (std::vector<int64_t>{1, 3}));
    const nlohmann::json alternating_written = hf_llama_config_json(alternating);
    EXPECT_EQ(alternating_written["max_window_layers"], 0);
    EXPECT_TRUE(hf_llama_config(alternating_written, "config.json") == alternating);

    nlohmann::json defaulted = hf;  // transformers' default of 28 full blocks covers all 4
    defaulted.erase("max_window_layers");
    EXPECT_EQ(hf_llama_config(defaulted, "config.json").attention_window, 0);
    nlohmann::json whole_context = hf;
    whole_context["sliding_window"] = 64;  // max_position_embeddings
    EXPECT_EQ(hf_llama_config(whole_context, "config.json").attention_window, 0);
    nlohmann::json off = hf;  // Qwen2.5's: a window recorded, but not used
    off["use_sliding_window"] = false;
    EXPECT_EQ(hf_llama_config(off, "config.json").attention_window, 0);
    off["layer_types"] = typed["layer_types"];
    std::string message = testing::error_of([&] { hf_llama_config(off, "config.json"); });
    EXPECT_TRUE(testing::contains(message, "field 'layer_types' names sliding layers, but the model has no window"))
        << message;
    nlohmann::json zero = hf;
    zero["sliding_window"] = 0;
    message = testing::error_of([&] { hf_llama_config(zero, "config.json"); });
    EXPECT_TRUE(testing::contains(message, "field 'sliding_window' is '0', expected a positive number")) << message;
    nlohmann::json short_types = hf;
    short_types["layer_types"] = {"full_attention"};
    message = testing::error_of([&] { hf_llama_config(short_types, "config.json"); });
    EXPECT_TRUE(testing::contains(message, "field 'layer_types' must name each of the 4 layers")) << message;
  }
}

// A config.json without model_type reads as GPT-2 only when it has GPT-2's fields (old GPT-2 uploads);
// a Llama config missing it names the field, not GPT-2's tie_word_embeddings.
TEST(HfLlama, AConfigWithoutModelTypeNamesTheField) {
  const ModelConfig config = model_preset("llama-tiny");
  const auto dir = testing::scratch_dir();
  save_hf_llama(dir, config, Decoder(config).named_params());
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  hf.erase("model_type");
  testing::write_text(dir / "config.json", hf.dump());
  const std::string message = testing::error_of([&] { read_hf_config(dir); });
  EXPECT_TRUE(testing::contains(message, "config.json': missing field 'model_type' (architecture "
                                         "'LlamaForCausalLM'); add the one transformers writes"))
      << message;
  const nlohmann::json gpt2 = {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"vocab_size", 256}, {"n_positions", 64}};
  testing::write_text(dir / "config.json", gpt2.dump());
  EXPECT_EQ(read_hf_config(dir).naming, Naming::gpt2);
}

// Phi-3's config: model_type phi3 and Phi3ForCausalLM written and read back; a partial_rotary_factor
// that turns an odd number of a head's channels, and a longrope rope_scaling without its factors or
// without the top-level original_max_position_embeddings, refused naming the key.
TEST(HfLlama, Phi3ConfigAndWhatItRefuses) {
  const ModelConfig config = model_preset("phi3-tiny");
  const auto dir = testing::scratch_dir();
  save_hf_llama(dir, config, Decoder(config).named_params());
  nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["model_type"], "phi3");
  EXPECT_EQ(hf["architectures"][0], "Phi3ForCausalLM");
  EXPECT_EQ(hf["original_max_position_embeddings"], 8);
  EXPECT_EQ(hf["partial_rotary_factor"], 0.75);
  EXPECT_TRUE(read_hf_config(dir) == config);
  EXPECT_EQ(model_family(config), "phi3");
  nlohmann::json without_original = hf;
  without_original.erase("original_max_position_embeddings");
  nlohmann::json odd = hf, without_long = hf;
  odd["partial_rotary_factor"] = 0.7;  // int(8 x 0.7) = 5 channels
  without_long["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0, 1.0, 1.0}}};
  for (const auto& [changed, part] :
       {std::pair<nlohmann::json, const char*>{odd, "'partial_rotary_factor' (0.7) must rotate an even number"},
        {without_long, "longrope rope_scaling needs 'long_factor'"},
        {without_original, "missing field 'original_max_position_embeddings'"}}) {
    testing::write_text(dir / "config.json", changed.dump());
    testing::expect_error_with([&] { read_hf_config(dir); }, {part});
  }
}

// Phi-4-mini's form: partial rotary (transformers turns a head's first 6 of 14 channels, Tessera its
// last: each q and k head's rows move on import and back on export, v's stay) and LongRoPE's factors
// with the original length at the config's top level; everything round-trips bit for bit.
TEST(HfLlama, Phi3PartialRotaryAndLongRopeRoundTrip) {
  ModelConfig config = model_preset("phi3-tiny");
  config.num_heads = 2, config.num_kv_heads = 1, config.channels = 28, config.rotary_dims = 6;  // heads of 14
  config.rope.longrope = true;
  config.rope.original_max_positions = 16;
  config.rope.factor = 4;  // max_position_embeddings 64 / 16
  config.rope.short_factor = {1.0f, 1.25f, 1.5f};
  config.rope.long_factor = {1.0f, 3.0f, 7.5f};
  Decoder original(config);
  randomise(original, 9);
  const auto dir = testing::scratch_dir();
  save_hf_llama(dir, config, original.named_params());
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["original_max_position_embeddings"], 16);
  EXPECT_EQ(int64_t(14 * hf["partial_rotary_factor"].get<double>()), 6);  // transformers' int(head_dim * factor)
  EXPECT_EQ(hf["rope_scaling"]["type"], "longrope");
  EXPECT_EQ(hf["rope_scaling"]["long_factor"], nlohmann::json::array({1.0, 3.0, 7.5}));
  EXPECT_TRUE(read_hf_config(dir) == config);

  const SafetensorsFile file(dir / "model.safetensors");
  const std::vector<float> qkv = file.read_f32("model.layers.0.self_attn.qkv_proj.weight");
  const auto named = std::find_if(original.named_params().begin(), original.named_params().end(),
                                  [](const NamedTensor& p) { return p.name == "layers.0.self_attn.qkv_proj.weight"; });
  ASSERT_NE(named, original.named_params().end());
  const Tensor& ours = named->tensor;
  const int64_t C = 28, HS = 14, R = 6;
  for (int64_t head = 0; head < 4; ++head)
    for (int64_t j = 0; j < HS; ++j) {
      const bool v = head == 3;  // heads: 2 q, 1 k, 1 v
      const int64_t ours_row = head * HS + (v ? j : j < R ? HS - R + j : j - R);
      for (int64_t col = 0; col < C; col += 9)
        ASSERT_EQ(qkv[size_t((head * HS + j) * C + col)], ours.f32()[ours_row * C + col]) << head << " " << j;
    }
  Decoder imported(config);
  load_hf_model(dir, config, imported.named_params());
  expect_same_bits(original, imported);
}

// A NaN or infinity in a Hugging Face tensor (a diverged run's upload, a damaged download) is refused
// naming the shard, the tensor and the element; the import would otherwise train on NaN, or write a
// checkpoint that its own loader then calls corrupt.
TEST(HfLlama, NonFiniteWeightsAreRefusedNamingTheTensor) {
  const ModelConfig config = model_preset("llama-tiny");
  Decoder original(config);
  randomise(original, 6);
  const auto dir = testing::scratch_dir();
  save_hf_llama(dir, config, original.named_params(), 20000);
  const nlohmann::json index = nlohmann::json::parse(testing::read_text(dir / "model.safetensors.index.json"));
  const std::string tensor = "model.layers.1.mlp.down_proj.weight";
  const std::filesystem::path shard = dir / index["weight_map"][tensor].get<std::string>();
  for (const float bad : {std::nanf(""), -INFINITY}) {
    std::vector<std::vector<bf16>> storage;
    std::vector<SafetensorsEntry> entries;
    {
      SafetensorsFile file(shard);
      for (const SafetensorsInfo& t : file.tensors()) {
        storage.emplace_back();
        for (float v : file.read_f32(t.name)) storage.back().push_back(to_bf16(v));
        if (t.name == tensor) storage.back()[37] = to_bf16(bad);
        entries.push_back({t.name, DType::bf16, t.shape, storage.back().data()});
      }
    }
    write_safetensors(shard, entries);
    Decoder imported(config);
    const std::string message = testing::error_of([&] { load_hf_model(dir, config, imported.named_params()); });
    EXPECT_TRUE(testing::contains(message, shard.string() + "': tensor '" + tensor + "' holds " +
                                               (bad != bad ? "nan" : "-inf") + " at element 37; the file is damaged"))
        << message;
  }
}

// A DeepSeek-style model without latent attention (shared experts, a sigmoid router, a dense first block) is
// GLM-4.5's computation without its biases and partial rotary: exported in that form, read back the same.
TEST(HfLlama, DeepSeekStyleExportsAsGlm4Moe) {
  const auto dir = testing::scratch_dir();
  const ModelConfig config = save_preset("deepseek-moe-tiny", dir);
  const nlohmann::json hf = nlohmann::json::parse(testing::read_text(dir / "config.json"));
  EXPECT_EQ(hf["architectures"][0], "Glm4MoeForCausalLM");
  EXPECT_EQ(hf["partial_rotary_factor"], 1.0);
  EXPECT_TRUE(read_hf_config(dir) == config);
}

}  // namespace
}  // namespace tessera
