// tessera convert between Hugging Face folders and checkpoints, on folders a user gets wrong: each
// failure is one "tessera: error:" line naming the file and the fix, a non-zero exit, and no output
// left behind (no --out run folder from a refused import; a failed export leaves --to-hf as it was).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "checkpoint/hf_llama.h"
#include "checkpoint/safetensors.h"
#include "core/fp8.h"
#include "nn/decoder.h"
#include "nn/model_presets.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

const std::string kTessera = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE);

testing::CommandResult tessera(const std::string& args) { return testing::run_command(kTessera + " " + args); }

class HfConvert : public ::testing::Test {
 protected:
  // dir/hf: a llama-tiny Hugging Face folder; dir/run: its import.
  void SetUp() override {
    dir = testing::scratch_dir();
    const ModelConfig config = model_preset("llama-tiny");
    save_hf_llama(dir / "hf", config, Decoder(config).named_params());
    const testing::CommandResult r = tessera("convert --from-hf " + path("hf") + " --out " + path("run"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  // Overwrites the 4 bytes `from_end` bytes before the end of `file` with `value`.
  static void poke_float(const fs::path& file, size_t from_end, float value) {
    std::string bytes = testing::read_text(file);
    std::memcpy(bytes.data() + bytes.size() - from_end, &value, 4);
    testing::write_text(file, bytes);
  }
  fs::path dir;
};

TEST_F(HfConvert, ARefusedImportWritesNoRunFolder) {
  poke_float(dir / "hf" / "model.safetensors", 8, std::nanf(""));  // model.norm.weight, sorted last
  testing::CommandResult r = tessera("convert --from-hf " + path("hf") + " --out " + path("nan-run"));
  testing::expect_one_line_error(r, "tensor 'model.norm.weight' holds nan at element 30; the file is damaged");
  EXPECT_FALSE(fs::exists(dir / "nan-run"));

  fs::remove(dir / "hf" / "model.safetensors");
  testing::write_text(dir / "hf" / "pytorch_model.bin", "pickle");
  r = tessera("convert --from-hf " + path("hf") + " --out " + path("pickle-run"));
  testing::expect_one_line_error(r, "PyTorch pickles, which Tessera does not read: save them as safetensors first");
  EXPECT_FALSE(fs::exists(dir / "pickle-run"));
}

// A tokenizer.json Tessera cannot read (a Unigram model) beside the weights is left out with a note:
// convert and eval need none; generate, which does, says why it has none.
TEST_F(HfConvert, AnUnreadableTokenizerBesideTheWeightsIsNamedAndLeftOut) {
  testing::write_text(dir / "hf" / "tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  const std::string note = "note: the tokenizer beside the weights was not loaded (";
  testing::CommandResult r = tessera("convert --from-hf " + path("hf") + " --out " + path("unigram-run"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, note)) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "Unigram")) << r.output;
  EXPECT_TRUE(fs::exists(dir / "unigram-run"));
  EXPECT_FALSE(fs::exists(dir / "unigram-run" / "tokenizer.json"));

  r = tessera("generate --init-from " + path("hf") + " --prompt hello --max-new-tokens 2");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "generate: no tokenizer; pass --tokenizer (the tokenizer beside the weights "
                                          "was not loaded ("))
      << r.output;
}

// The run's tokenizer is read before any weight is written (an export without it is not the model
// the run trained), and a damaged weight found while writing removes what was written.
TEST_F(HfConvert, AFailedExportLeavesTheFolderAsItWas) {
  testing::write_text(dir / "run" / "tokenizer.json", "{");
  fs::create_directory(dir / "empty");
  for (const char* out : {"new", "empty"}) {
    const testing::CommandResult r = tessera("convert --checkpoint " + path("run") + " --to-hf " + path(out));
    testing::expect_one_line_error(r, "tokenizer.json");
    EXPECT_EQ(fs::exists(dir / out), std::string(out) == "empty") << out;
    EXPECT_TRUE(!fs::exists(dir / out) || fs::is_empty(dir / out)) << out;
  }
  fs::remove(dir / "run" / "tokenizer.json");
  poke_float(fs::canonical(dir / "run" / "ckpt-latest") / "model.safetensors", 8, 0.25f);
  const testing::CommandResult r = tessera("convert --checkpoint " + path("run") + " --to-hf " + path("new"));
  testing::expect_one_line_error(r, "is corrupt");
  EXPECT_FALSE(fs::exists(dir / "new"));
}

// An import holds weights alone: --resume in its folder is refused with the way that works, which does.
TEST_F(HfConvert, AnImportStartsARunThroughInitFromNotResume) {
  const std::string shard = testing::write_random_shard(dir, 4096, 256, 5).string();
  const std::string run = "train --quiet --device cpu --batch-size 2 --seq-len 16 --steps 1 --train-data " + shard;
  testing::expect_one_line_error(tessera(run + " --resume --out-dir " + path("run")),
                                 "holds weights only: start a new run from it with --init-from '" + path("run") +
                                     "/ckpt-00000000' and another --out-dir");
  const testing::CommandResult r = tessera(run + " --init-from " + path("run") + " --out-dir " + path("tuned"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "tuned" / "ckpt-00000001"));
}

// --dtype bf16 writes every tensor as BF16 (the fp32 export's values rounded to nearest even) in half
// the bytes, says so in config.json, and imports again; an import refuses --dtype.
TEST_F(HfConvert, AnExportInBf16HoldsTheRoundedWeights) {
  for (const char* dtype : {"fp32", "bf16"}) {
    const testing::CommandResult r =
        tessera("convert --checkpoint " + path("run") + " --to-hf " + path(dtype) + " --dtype " + dtype);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const SafetensorsFile exact(dir / "fp32" / "model.safetensors"), rounded(dir / "bf16" / "model.safetensors");
  ASSERT_EQ(rounded.tensors().size(), exact.tensors().size());
  for (const SafetensorsInfo& t : rounded.tensors()) {
    EXPECT_EQ(t.dtype, "BF16") << t.name;
    const std::vector<float> want = exact.read_f32(t.name), got = rounded.read_f32(t.name);
    ASSERT_EQ(got.size(), want.size()) << t.name;
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], to_float(to_bf16(want[i]))) << t.name << "[" << i << "]";
  }
  EXPECT_LT(fs::file_size(dir / "bf16" / "model.safetensors"), fs::file_size(dir / "fp32" / "model.safetensors") * 6 / 10);
  EXPECT_TRUE(testing::contains(testing::read_text(dir / "bf16" / "config.json"), R"("torch_dtype": "bfloat16")"));
  EXPECT_EQ(tessera("convert --from-hf " + path("bf16") + " --out " + path("reimported")).exit_code, 0);

  testing::expect_one_line_error(tessera("convert --checkpoint " + path("run") + " --to-hf " + path("x") + " --dtype int8"),
                                 "--dtype must be fp32 (exact), bf16 or fp16 (half the bytes, rounded to nearest), or "
                                 "fp8 (fine-grained FP8 blocks), got 'int8'");
  testing::expect_one_line_error(tessera("convert --from-hf " + path("hf") + " --out " + path("y") + " --dtype bf16"),
                                 "--dtype sets an export's weights (with --to-hf)");
  EXPECT_FALSE(fs::exists(dir / "x"));
  EXPECT_FALSE(fs::exists(dir / "y"));
}

// --dtype fp8 writes DeepSeek-V3's release form: the projections as E4M3 codes with a scale per 128 x 128
// block, the embeddings and norms BF16, quantization_config in config.json; the import reads it back as
// those codes times their scales.
TEST_F(HfConvert, AnExportInFp8HoldsBlocksTheImportReadsBack) {
  ASSERT_EQ(tessera("convert --checkpoint " + path("run") + " --to-hf " + path("fp8") + " --dtype fp8").exit_code, 0);
  const SafetensorsFile file(dir / "fp8" / "model.safetensors");
  int quantized = 0;
  for (const SafetensorsInfo& t : file.tensors()) {
    if (t.name.ends_with("_scale_inv")) continue;
    const bool projection = t.name.ends_with("_proj.weight");
    EXPECT_EQ(t.dtype, projection ? "F8_E4M3" : "BF16") << t.name;
    if (!projection) continue;
    EXPECT_EQ(file.info(t.name + "_scale_inv").dtype, "F32") << t.name;
    ++quantized;
  }
  EXPECT_EQ(quantized, 14);  // 2 blocks of q, k, v, o, gate, up and down
  const nlohmann::json config = nlohmann::json::parse(testing::read_text(dir / "fp8" / "config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "fp8");
  EXPECT_EQ(config["quantization_config"]["weight_block_size"], nlohmann::json::array({128, 128}));
  EXPECT_EQ(config["torch_dtype"], "bfloat16");

  ASSERT_EQ(tessera("convert --from-hf " + path("fp8") + " --out " + path("reimported")).exit_code, 0);
  ASSERT_EQ(tessera("convert --checkpoint " + path("reimported") + " --to-hf " + path("back")).exit_code, 0);
  const SafetensorsFile back(dir / "back" / "model.safetensors");
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  const std::vector<float> scale = file.read_f32(name + "_scale_inv"), got = back.read_f32(name);
  const std::span<const std::byte> codes = file.bytes(name);
  ASSERT_EQ(scale.size(), 1u);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], fp8_decode(uint8_t(codes[i]), Fp8Format::e4m3) * scale[0]) << name << "[" << i << "]";
}

}  // namespace
}  // namespace tessera
