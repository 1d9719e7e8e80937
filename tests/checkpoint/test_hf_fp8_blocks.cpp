// Fine-grained FP8 weights in a Hugging Face folder (DeepSeek-V3's storage): each code times its
// block's scale, partial blocks at the edges, E4M3 and E5M2 codes, scales in F32 or BF16 and hidden
// from the folder's tensor list; every malformed folder refused naming the tensor or the config key.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_model.h"
#include "checkpoint/hf_source.h"
#include "checkpoint/hf_weight_files.h"
#include "nn/decoder.h"
#include "nn/decoder_layout.h"
#include "nn/model_presets.h"
#include "support/test_support.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// One tensor of a hand-made safetensors file: a dtype as the file spells it and its raw bytes.
struct RawTensor {
  std::string name;
  std::string dtype;
  Shape shape;
  std::string bytes;
};

std::string floats_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// dir/model.safetensors holding `tensors`, and dir/config.json holding `quantization` (when not null)
// as its quantization_config.
void write_folder(const fs::path& dir, const std::vector<RawTensor>& tensors, const json& quantization) {
  json header = json::object();
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  testing::write_raw(dir / "model.safetensors", header.dump(), data);
  json config = {{"model_type", "deepseek_v3"}};
  if (!quantization.is_null()) config["quantization_config"] = quantization;
  testing::write_text(dir / "config.json", config.dump());
}

json fp8_config(const json& block = json::array({2, 3})) {
  return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", block}};
}

// A 5 x 7 weight of one code in 2 x 3 blocks (3 x 3 of them, the last row and column partial) and
// scales 2^(3i + j) for block (i, j).
std::vector<RawTensor> one_code_weight(uint8_t code, const std::string& dtype = "F8_E4M3") {
  std::vector<float> scales(9);
  for (int b = 0; b < 9; ++b) scales[size_t(b)] = std::ldexp(1.0f, b);
  return {{"w.weight", dtype, {5, 7}, std::string(35, char(code))},
          {"w.weight_scale_inv", "F32", {3, 3}, floats_bytes(scales)},
          {"norm.weight", "F32", {2}, floats_bytes({1.0f, 2.0f})}};
}

TEST(HfFp8Blocks, EachValueIsItsCodeTimesItsBlocksScale) {
  const fs::path dir = testing::scratch_dir();
  write_folder(dir, one_code_weight(0x38), fp8_config());  // E4M3 0x38 = 1.0
  const HfWeightFiles files(dir);
  EXPECT_EQ(files.names(), (std::vector<std::string>{"norm.weight", "w.weight"}));
  files.check("w.weight", {5, 7});
  const std::vector<float> w = files.read_f32("w.weight");
  ASSERT_EQ(w.size(), 35u);
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 7; ++c) EXPECT_EQ(w[size_t(r * 7 + c)], std::ldexp(1.0f, 3 * (r / 2) + c / 3)) << r << "," << c;
  EXPECT_EQ(files.read_f32("norm.weight"), (std::vector<float>{1.0f, 2.0f}));
}

// Codes by hand: E4M3's largest, smallest subnormal and a negative; E5M2's 1.0 and -57344.
TEST(HfFp8Blocks, CodesDecodeAsTheirFormatSays) {
  const std::vector<std::tuple<std::string, uint8_t, float>> cases = {
      {"F8_E4M3", 0x7e, 448.0f}, {"F8_E4M3", 0x01, std::ldexp(1.0f, -9)}, {"F8_E4M3", 0xb8, -1.0f},
      {"F8_E4M3", 0x80, -0.0f},  {"F8_E5M2", 0x3c, 1.0f},                 {"F8_E5M2", 0xfb, -57344.0f}};
  for (const auto& [dtype, code, value] : cases) {
    const fs::path dir = testing::scratch_dir() / (dtype + std::to_string(code));
    fs::create_directories(dir);
    write_folder(dir, one_code_weight(code, dtype), fp8_config());
    EXPECT_EQ(HfWeightFiles(dir).read_f32("w.weight")[0], value) << dtype << " code " << int(code);
  }
}

// BF16 scales (as some Qwen3 *-FP8 releases store them) and the 128 x 128 blocks transformers assumes
// when weight_block_size is absent.
TEST(HfFp8Blocks, Bf16ScalesAndTheDefaultBlockSize) {
  const fs::path dir = testing::scratch_dir();
  const uint16_t bf16_three = to_bf16(3.0f).bits, bf16_half = to_bf16(0.5f).bits;
  std::string scales(reinterpret_cast<const char*>(&bf16_three), 2);
  scales.append(reinterpret_cast<const char*>(&bf16_half), 2);
  json config = fp8_config();
  config.erase("weight_block_size");
  write_folder(dir, {{"w.weight", "F8_E4M3", {130, 2}, std::string(260, char(0x40))},  // 0x40 = 2.0
                     {"w.weight_scale_inv", "BF16", {2, 1}, scales}},
               config);
  const std::vector<float> w = HfWeightFiles(dir).read_f32("w.weight");
  EXPECT_EQ(w[0], 6.0f);
  EXPECT_EQ(w[255], 6.0f);   // row 127
  EXPECT_EQ(w[256], 1.0f);   // row 128, the second block
  EXPECT_EQ(w[259], 1.0f);
}

TEST(HfFp8Blocks, MalformedFoldersAreRefusedNamingTheTensorOrKey) {
  const fs::path root = testing::scratch_dir();
  int n = 0;
  auto refused = [&](const std::vector<RawTensor>& tensors, const json& quantization,
                     const std::vector<std::string>& parts) {
    const fs::path dir = root / std::to_string(n++);
    fs::create_directories(dir);
    write_folder(dir, tensors, quantization);
    testing::expect_error_with([&] { HfWeightFiles files(dir); }, parts);
  };
  std::vector<RawTensor> good = one_code_weight(0x38);

  refused(good, nullptr, {"'w.weight' is F8_E4M3", "declares no quantization_config", "weight_block_size"});
  refused(good, {{"quant_method", "gptq"}, {"bits", 4}}, {"quant_method is '\"gptq\"'", "unquantized (BF16) release"});
  refused(good, fp8_config(json::array({128})), {"weight_block_size is '[128]'", "[rows, columns]"});
  refused(good, fp8_config(json::array({0, 128})), {"weight_block_size is '[0,128]'"});
  refused(good, fp8_config(json::array({3, 3})), {"'w.weight_scale_inv' is F32 of shape (3, 3)", "blocks of 3 x 3",
                                                  "need F32, BF16 or F16 of shape (2, 3)"});
  refused({good[0], good[2]}, fp8_config(), {"'w.weight' is F8_E4M3 without its block scales 'w.weight_scale_inv'"});
  refused({{"w.weight", "F8_E4M3", {5, 7}, std::string(35, '\0')},
           {"w.weight_scale_inv", "I32", {3, 3}, std::string(36, '\0')}},
          fp8_config(), {"'w.weight_scale_inv' is I32"});
  refused({{"w.weight", "F8_E4M3", {5, 7, 1}, std::string(35, '\0')}}, fp8_config(),
          {"'w.weight' is F8_E4M3 of shape (5, 7, 1)", "matrices only"});
  refused({{"w.weight", "F32", {1}, floats_bytes({1.0f})}, {"w.weight_scale_inv", "F32", {1}, floats_bytes({1.0f})}},
          fp8_config(), {"'w.weight_scale_inv' scales 'w.weight', which is F32, not FP8", "drop the scales"});

  // Damage found when the tensor is read: a scale that is not positive, a NaN code (0x7f).
  for (float scale : {0.0f, -1.0f, NAN}) {
    std::vector<RawTensor> damaged = good;
    std::vector<float> scales(9, 1.0f);
    scales[4] = scale;
    damaged[1].bytes = floats_bytes(scales);
    const fs::path dir = root / std::to_string(n++);
    fs::create_directories(dir);
    write_folder(dir, damaged, fp8_config());
    const HfWeightFiles files(dir);
    testing::expect_error_with([&] { files.read_f32("w.weight"); },
                               {"block scale 'w.weight_scale_inv'", "at element 4", "damaged"});
  }
  std::vector<RawTensor> nan_code = good;
  nan_code[0].bytes[10] = char(0x7f);
  const fs::path dir = root / std::to_string(n++);
  fs::create_directories(dir);
  write_folder(dir, nan_code, fp8_config());
  testing::expect_error_with([&] { HfWeightFiles(dir).read_f32("w.weight"); }, {"'w.weight' holds nan at element 10"});
  testing::expect_error_with([&] { HfWeightFiles(dir).check("norm.weight", {3}); },
                             {"'norm.weight' has shape (2), expected (3)"});
}

// Tensors to export: two projections (a down_proj of 20 x 30 over a wide range of magnitudes; a q_proj
// of 9 x 7 whose first block holds 448, E4M3's ties at scale 1 and halves of its smallest subnormal, and
// whose last row is all zero) and two tensors that stay unquantized (a router, a norm).
std::vector<HfTensorOut> export_tensors() {
  std::vector<float> down = testing::random_floats(600, 7);
  for (size_t i = 0; i < down.size(); ++i) down[i] *= std::ldexp(1.0f, int(i % 23) - 12);
  const std::vector<float> ties = {448, 1.0625f, 1.1875f, -1.0625f, std::ldexp(1.0f, -10), 3 * std::ldexp(1.0f, -10),
                                   -std::ldexp(1.0f, -10), 17, 19, 0.3f};
  std::vector<float> q(63, 0.0f);
  for (size_t i = 0; i < 56; ++i) q[i] = ties[i % ties.size()];
  auto copy = [](std::vector<float> v) { return [v](float* out) { std::copy(v.begin(), v.end(), out); }; };
  return {{"model.layers.0.mlp.down_proj.weight", {20, 30}, copy(down)},
          {"model.layers.0.self_attn.q_proj.weight", {9, 7}, copy(q)},
          {"model.layers.0.mlp.gate.weight", {4, 6}, copy(testing::random_floats(24, 8))},
          {"model.norm.weight", {5}, copy(testing::random_floats(5, 9))}};
}

// The codes and scales of an FP8 export, the independent E4M3 encoder of tests/reference says, are
// exactly what PyTorch computes from the same fp32 weights (scale = amax / 448 in fp32, nearest code,
// ties to even); the router and the norm are BF16.
TEST(HfFp8Blocks, AnExportQuantizesAsPyTorchDoes) {
  const fs::path dir = testing::scratch_dir();
  fs::create_directories(dir / "f32");
  fs::create_directories(dir / "fp8");
  write_hf_weights(dir / "f32", export_tensors(), int64_t(1) << 30);
  write_hf_weights(dir / "fp8", export_tensors(), int64_t(1) << 30, HfWeightType(DType::bf16, {8, 12}));
  const SafetensorsFile file(dir / "fp8" / "model.safetensors");
  EXPECT_EQ(file.info("model.layers.0.mlp.down_proj.weight").dtype, "F8_E4M3");
  EXPECT_EQ(file.info("model.layers.0.mlp.down_proj.weight_scale_inv").shape, (Shape{3, 3}));
  EXPECT_EQ(file.info("model.layers.0.self_attn.q_proj.weight_scale_inv").shape, (Shape{2, 1}));
  EXPECT_EQ(file.info("model.layers.0.mlp.gate.weight").dtype, "BF16");
  EXPECT_EQ(file.info("model.norm.weight").dtype, "BF16");
  const std::vector<float> q_scales = file.read_f32("model.layers.0.self_attn.q_proj.weight_scale_inv");
  EXPECT_EQ(q_scales, (std::vector<float>{1.0f, 1.0f}));  // 448 / 448, and the zero block's 1
  const testing::CommandResult checked = testing::run_command(
      "/usr/bin/python3 " + std::string(TESSERA_SOURCE_DIR) + "/tests/reference/check_fp8_export.py " +
      (dir / "f32").string() + " " + (dir / "fp8").string() + " 8 12");
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_TRUE(testing::contains(checked.output, "2 FP8 tensors match PyTorch's quantization bit for bit")) << checked.output;
}

// Shards of an FP8 export place each scale beside its weight (the index says so), and the folder reads
// back through the importer within half an E4M3 step of the exported weights.
TEST(HfFp8Blocks, AShardedExportReadsBack) {
  const fs::path dir = testing::scratch_dir();
  write_hf_weights(dir, export_tensors(), 300, HfWeightType(DType::bf16, {8, 12}));
  testing::write_text(dir / "config.json", json{{"quantization_config", fp8_config({8, 12})}}.dump());
  const json index = json::parse(testing::read_text(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"]["model.layers.0.mlp.down_proj.weight_scale_inv"],
            index["weight_map"]["model.layers.0.mlp.down_proj.weight"]);
  const HfWeightFiles files(dir);
  for (const HfTensorOut& t : export_tensors()) {
    std::vector<float> want(size_t(shape_numel(t.shape)));
    t.fill(want.data());
    const std::vector<float> got = files.read_f32(t.name);
    const std::vector<float> scales =
        hf_fp8_quantized(t.name) ? files.file_of(t.name).read_f32(fp8_scale_name(t.name)) : std::vector<float>{};
    for (size_t i = 0; i < want.size(); ++i) {
      if (!hf_fp8_quantized(t.name)) {
        ASSERT_EQ(got[i], to_float(to_bf16(want[i]))) << t.name << "[" << i << "]";
        continue;
      }
      const int64_t cols = t.shape[1], block = (int64_t(i) / cols / 8) * ((cols + 11) / 12) + int64_t(i) % cols / 12;
      const float bound = std::ldexp(std::fabs(want[i]), -4) + std::ldexp(scales[size_t(block)], -10);
      ASSERT_LE(std::fabs(got[i] - want[i]), bound * (1 + 1e-6f)) << t.name << "[" << i << "]";
    }
  }
}

// GPT-2's Conv1D weights have no fine-grained FP8 form: its export is refused, before anything is written.
TEST(HfFp8Blocks, AGpt2ExportInFp8IsRefused) {
  const fs::path dir = testing::scratch_dir();
  const ModelConfig config = model_preset("gpt2-tiny");
  Decoder model(config);
  testing::expect_error_with(
      [&] {
        save_hf_model(dir / "hf", config, values_of_named(decoder_layout(config), model.named_params(), "test"), {},
                      HfWeightType(DType::bf16, kDeepseekFp8Blocks));
      },
      {"a GPT-2 has no fine-grained FP8 form", "export it in bf16 or fp16"});
  EXPECT_FALSE(fs::exists(dir / "hf"));
}

}  // namespace
}  // namespace tessera
