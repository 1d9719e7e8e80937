// write_hf_weights in BF16 and F16: each value rounded to nearest even, shards sized by the bytes of
// the type written, an F16 value beyond 65504 refused naming its tensor, and torch_dtype's spelling.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_weight_files.h"
#include "support/test_support.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

// Two 2x3 tensors whose values need rounding in both 16-bit types.
std::vector<HfTensorOut> tensors(float scale) {
  std::vector<HfTensorOut> out;
  for (const char* name : {"a.weight", "b.weight"})
    out.push_back({name, Shape{2, 3}, [scale](float* v) {
                     for (int i = 0; i < 6; ++i) v[i] = scale * (1.0f + 1e-3f * float(i)) * (i % 2 ? -1.0f : 1.0f);
                   }});
  return out;
}

TEST(HfWeightDtypes, SixteenBitWeightsAreTheRoundedValues) {
  const fs::path dir = testing::scratch_dir();
  std::vector<float> want(6);
  tensors(3.14159f)[0].fill(want.data());
  for (DType dtype : {DType::bf16, DType::f16}) {
    const fs::path out = dir / std::string(dtype_name(dtype));
    fs::create_directories(out);
    write_hf_weights(out, tensors(3.14159f), int64_t(1) << 30, dtype);
    const SafetensorsFile file(out / "model.safetensors");
    ASSERT_EQ(file.tensors().size(), 2u);
    for (const SafetensorsInfo& t : file.tensors()) {
      EXPECT_EQ(t.type, dtype) << t.name;
      const std::vector<float> got = file.read_f32(t.name);
      for (size_t i = 0; i < 6; ++i) {
        const float rounded = dtype == DType::bf16 ? to_float(to_bf16(want[i])) : to_float(to_f16(want[i]));
        EXPECT_EQ(got[i], rounded) << t.name << "[" << i << "]";
        EXPECT_NE(got[i], want[i]) << "not rounded: " << t.name << "[" << i << "]";
      }
    }
  }
  EXPECT_STREQ(hf_torch_dtype(DType::bf16), "bfloat16");
  EXPECT_STREQ(hf_torch_dtype(DType::f16), "float16");
  EXPECT_STREQ(hf_torch_dtype(DType::f32), "float32");
}

// 12 bytes a tensor in BF16: a 12-byte shard limit puts each in a shard of its own, and the index
// counts 24 bytes in all (F32 would count 48).
TEST(HfWeightDtypes, ShardsAreSizedByTheTypeWritten) {
  const fs::path dir = testing::scratch_dir();
  write_hf_weights(dir, tensors(1.0f), 12, DType::bf16);
  const nlohmann::json index = nlohmann::json::parse(testing::read_text(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 24);
  EXPECT_EQ(index["weight_map"]["a.weight"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["b.weight"], "model-00002-of-00002.safetensors");
}

TEST(HfWeightDtypes, AValueBeyondFp16sRangeIsRefusedNamingItsTensor) {
  const fs::path dir = testing::scratch_dir();
  testing::expect_error_with([&] { write_hf_weights(dir, tensors(70000.0f), int64_t(1) << 30, DType::f16); },
                             {"--dtype fp16: tensor 'a.weight' holds 70000 at element 0, beyond fp16's range (65504); "
                              "export in bf16 or fp32"});
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
}

}  // namespace
}  // namespace tessera
