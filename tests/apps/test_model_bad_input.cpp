// Issue 7's bad input for Llama and MoE models, given to the tessera binary: a Hugging Face config
// or weights a family cannot take, flags that do not fit the model, and a checkpoint resumed as the
// other kind of model. Each case ends with one "tessera: error:" line naming the key, tensor or
// flag and the expected value, an exit code in 1..123, and the run folders unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

const std::string kTessera = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE);

std::string train_args(const fs::path& dir, const std::string& model, const std::string& out) {
  return "train --model " + model + " --quiet --device cpu --batch-size 2 --seq-len 16 --train-data " +
         (dir / "train_000000.bin").string() + " --out-dir " + (dir / out).string();
}

// dir/llama and dir/mixtral: finished 2-step runs; dir/llama-hf, dir/mixtral-hf: their exports.
void prepare_runs(const fs::path& dir) {
  testing::write_random_shard(dir, 4096, 256, 3);
  for (const std::string model : {"llama", "mixtral"}) {
    const testing::CommandResult run =
        testing::run_command(kTessera + " " + train_args(dir, model + "-tiny", model) + " --steps 2");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const testing::CommandResult hf = testing::run_command(kTessera + " convert --checkpoint " + (dir / model).string() +
                                                           " --to-hf " + (dir / (model + "-hf")).string());
    ASSERT_EQ(hf.exit_code, 0) << hf.output;
  }
}

void edit_json(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(testing::read_text(file));
  edit(j);
  testing::write_text(file, j.dump());
}

// Rewrites a safetensors file through `edit`, which may drop or replace entries.
void edit_tensors(const fs::path& file, const std::function<void(std::vector<SafetensorsEntry>&)>& edit) {
  std::vector<std::vector<float>> values;
  std::vector<SafetensorsEntry> entries;
  {
    SafetensorsFile in(file);
    values.reserve(in.tensors().size() + 1);
    for (const SafetensorsInfo& t : in.tensors()) {
      values.push_back(in.read_f32(t.name));
      entries.push_back({t.name, DType::f32, t.shape, values.back().data()});
    }
    edit(entries);
  }
  write_safetensors(file, entries);
}

struct ModelBadInput {
  std::string name;
  std::function<std::string(const fs::path& dir)> setup;  // breaks something, returns the arguments
  std::string needle;
};

// gtest prints a case by its name instead of its bytes.
void PrintTo(const ModelBadInput& c, std::ostream* os) { *os << c.name; }

// An import takes its config.json's shape: no --model (one that disagrees is refused before the weights are read).
std::string init_from(const fs::path& dir, const std::string& hf) {
  return "train --quiet --device cpu --batch-size 2 --seq-len 16 --train-data " + (dir / "train_000000.bin").string() +
         " --out-dir " + (dir / "fresh").string() + " --steps 1 --init-from " + (dir / hf).string();
}

std::vector<ModelBadInput> cases() {
  const std::string expert = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
  return {
      {"HeadsNotDividedByKvHeads",
       [](auto d) {
         edit_json(d / "llama-hf" / "config.json", [](auto& j) { j["num_key_value_heads"] = 3; });
         return init_from(d, "llama-hf");
       },
       "num_kv_heads (3) must divide num_heads (4)"},
      {"HeadsFlagNotDividedByKvHeads",
       [](auto d) { return train_args(d, "llama-tiny", "fresh") + " --steps 1 --heads 1"; },
       "num_kv_heads (2) must divide num_heads (1)"},
      {"UnknownModelType",
       [](auto d) {
         edit_json(d / "mixtral-hf" / "config.json", [](auto& j) { j["model_type"] = "falcon"; });
         return init_from(d, "mixtral-hf");
       },
       "field 'model_type' is '\"falcon\"'"},
      {"UnknownHiddenAct",
       [](auto d) {
         edit_json(d / "llama-hf" / "config.json", [](auto& j) { j["hidden_act"] = "gelu"; });
         return init_from(d, "llama-hf");
       },
       "field 'hidden_act' is '\"gelu\"', expected \"silu\""},
      {"UnknownRopeScaling",
       [](auto d) {
         edit_json(d / "llama-hf" / "config.json",
                   [](auto& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}}; });
         return init_from(d, "llama-hf");
       },
       "rope_scaling type '\"dynamic\"' is not supported"},
      {"QuantizedOtherThanFp8Blocks",  // GPTQ, AWQ, bitsandbytes: Tessera reads fine-grained FP8 only
       [](auto d) {
         edit_json(d / "llama-hf" / "config.json",
                   [](auto& j) { j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}}; });
         return init_from(d, "llama-hf");
       },
       "quantization_config's quant_method is '\"awq\"'; Tessera reads unquantized weights"},
      {"TopKAboveExperts",
       [](auto d) {
         edit_json(d / "mixtral-hf" / "config.json", [](auto& j) { j["num_experts_per_tok"] = 5; });
         return init_from(d, "mixtral-hf");
       },
       "top_k (5) must be between 1 and the number of experts (4)"},
      {"MixtralCheckpointResumedAsDense",
       [](auto d) { return train_args(d, "llama-tiny", "mixtral") + " --steps 4 --resume"; },
       "--model llama-tiny is a llama model but the checkpoint holds a mixtral model"},
      {"DenseCheckpointResumedAsMixtral",
       [](auto d) { return train_args(d, "mixtral-tiny", "llama") + " --steps 4 --resume"; },
       "--model mixtral-tiny is a mixtral model but the checkpoint holds a llama model"},
      // Qwen3's query/key norms make it a family of its own: a Llama import is not one.
      {"Qwen3ModelFromALlamaImport",
       [](auto d) { return train_args(d, "qwen3-tiny", "qwen3") + " --steps 1 --init-from " + (d / "llama-hf").string(); },
       "--model qwen3-tiny is a qwen3 model but the import holds a llama model"},
      {"MissingExpertTensor",
       [expert](auto d) {
         edit_tensors(d / "mixtral-hf" / "model.safetensors", [&](auto& entries) {
           std::erase_if(entries, [&](const SafetensorsEntry& e) { return e.name == expert; });
         });
         return init_from(d, "mixtral-hf");
       },
       "'" + expert + "' is missing (expected shape (32, 48))"},
      {"MisShapedExpertTensor",
       [expert](auto d) {
         edit_tensors(d / "mixtral-hf" / "model.safetensors", [&](auto& entries) {
           for (SafetensorsEntry& e : entries)
             if (e.name == expert) e.shape = {48, 32};
         });
         return init_from(d, "mixtral-hf");
       },
       "'" + expert + "' has shape (48, 32), expected (32, 48)"},
      {"MixtralWeightsUnderALlamaConfig",
       [](auto d) {
         fs::copy_file(d / "mixtral-hf" / "model.safetensors", d / "llama-hf" / "model.safetensors",
                       fs::copy_options::overwrite_existing);
         return init_from(d, "llama-hf");
       },
       "unexpected tensor 'model.layers.0.block_sparse_moe"},
      {"NegativeCapacityFactor",
       [](auto d) { return train_args(d, "mixtral-tiny", "fresh") + " --steps 1 --moe-capacity-factor -1"; },
       "--moe-capacity-factor must be 0 (dropless) or between 0.01 and 10000"},
      {"PresetOfAnotherStructureOnAnImport",  // qwen2-tiny has llama-tiny's widths, and q, k, v biases
       [](auto d) { return init_from(d, "llama-hf") + " --model qwen2-tiny"; },
       "--model qwen2-tiny is a qwen2 model but the import holds a llama model"},
      {"DefaultPresetNamedOnAnImport",  // gpt2-124m, the default, is checked like any other preset when named
       [](auto d) { return init_from(d, "llama-hf") + " --model gpt2-124m"; },
       "--init-from: --model gpt2-124m is a gpt2 model but the import holds a llama model"},
      {"PresetOfAnotherRopeOnAnImport",  // llama-tiny's RoPE turns at theta 10000
       [](auto d) {
         edit_json(d / "llama-hf" / "config.json", [](auto& j) { j["rope_theta"] = 500000.0; });
         return init_from(d, "llama-hf") + " --model llama-tiny";
       },
       "--model llama-tiny gives rope theta 10000, the import has theta 500000"},
      {"HugeCapacityFactor",  // 1e18 overflowed the capacity's count
       [](auto d) { return train_args(d, "mixtral-tiny", "fresh") + " --steps 1 --moe-capacity-factor 1e18"; },
       "--moe-capacity-factor must be 0 (dropless) or between 0.01 and 10000"},
      {"KvHeadsThatDoNotDivideTheHeads",
       [](auto d) { return train_args(d, "llama-tiny", "fresh") + " --steps 1 --heads 3 --channels 48"; },
       "(with --heads, give a multiple of 2)"},
      {"UnknownRecomputeMode",
       [](auto d) { return train_args(d, "llama-tiny", "fresh") + " --steps 1 --recompute some"; },
       "--recompute must be none, selective or full, got 'some'"},
      {"RecomputeLayersAboveTheModel",
       [](auto d) { return train_args(d, "llama-tiny", "fresh") + " --steps 1 --recompute full --recompute-layers 3"; },
       "--recompute-layers 3 is more than the model's 2 blocks"},
      {"RecomputeLayersWithoutRecompute",
       [](auto d) { return train_args(d, "llama-tiny", "fresh") + " --steps 1 --recompute-layers 1"; },
       "--recompute-layers 1 picks the blocks that --recompute recomputes, and --recompute is none"},
      {"MoeFlagOnADenseModel",
       [](auto d) { return train_args(d, "llama-tiny", "fresh") + " --steps 1 --moe-aux-coef 0.02"; },
       "--moe-aux-coef 0.02 applies to mixture-of-experts models, and llama-tiny (llama) has no experts"},
      {"MoeFlagOnADenseImport",
       [](auto d) { return init_from(d, "llama-hf") + " --moe-capacity-factor 1.25"; },
       "--moe-capacity-factor 1.25 applies to mixture-of-experts models, and the model (llama) has no experts"},
      {"BiasRateOnASoftmaxRouter",
       [](auto d) { return train_args(d, "mixtral-tiny", "fresh") + " --steps 1 --moe-bias-rate 0.01"; },
       "--moe-bias-rate 0.01 steps the balancing bias of sigmoid routers (DeepSeek-V3), and mixtral-tiny routes by "
       "softmax"},
  };
}

// The two run folders' files, to compare before and after.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const char* run : {"llama", "mixtral"})
    for (const auto& [name, bytes] : testing::folder_snapshot(root / run)) files[std::string(run) + "/" + name] = bytes;
  return files;
}

class ModelBadInputTable : public ::testing::TestWithParam<ModelBadInput> {};

TEST_P(ModelBadInputTable, OneLineNamingTheKeyAndNonZeroExit) {
  const ModelBadInput& c = GetParam();
  const fs::path dir = testing::scratch_dir();
  ASSERT_NO_FATAL_FAILURE(prepare_runs(dir));
  const std::string args = c.setup(dir);
  const auto before = snapshot(dir);
  const testing::CommandResult r =
      testing::run_command("{ timeout 60 env OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " " + args + " > /dev/null; }");
  EXPECT_GE(r.exit_code, 1) << args;
  EXPECT_LT(r.exit_code, 124) << "crashed or hung: " << args << "\n" << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_TRUE(r.output.starts_with("tessera: error: ")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, c.needle)) << "'" << c.needle << "' not in: " << r.output;
  EXPECT_TRUE(before == snapshot(dir)) << "a run folder changed: " << args;
}

INSTANTIATE_TEST_SUITE_P(Cases, ModelBadInputTable, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<ModelBadInput>& info) { return info.param.name; });

}  // namespace
}  // namespace tessera
