// `tessera plan memory` end to end: the table of bytes per pipeline stage with the verdict against
// --device-memory-gb (and the single flag changes that would fit), the same as JSON; bad input (a
// layout that does not divide the model, flags out of range) ends in one "tessera: error:" line
// naming the flag and the fix, and a non-zero exit.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {

const std::string kPlan = std::string(TESSERA_EXE) + " plan memory ";

TEST(PlanMemory, PrintsEveryStageAndWhetherItFits) {
  const testing::CommandResult r = testing::run_command(kPlan + "--model gpt2-124m --pp 2 --micro-batch-size 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "dp 1, tp 1, pp 2, cp 1, ep 1; ZeRO 0; bf16; micro-batch 4 x 1024 tokens"))
      << r.output;
  EXPECT_TRUE(testing::contains(r.output, "stage 1")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "+emb")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "+head")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "fits: the largest rank")) << r.output;
}

TEST(PlanMemory, NamesTheFlagsThatWouldFit) {
  const testing::CommandResult r =
      testing::run_command(kPlan + "--model gpt2-124m --micro-batch-size 64 --device-memory-gb 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "does not fit")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--micro-batch-size ")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--recompute full")) << r.output;
}

TEST(PlanMemory, JsonHasTheBytesOfEveryStage) {
  const testing::CommandResult r = testing::run_command(kPlan + "--model llama-mini --seq-len 256 --pp 2 --zero 1 --dp 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["ranks"].size(), 2u);
  for (const nlohmann::json& rank : j["ranks"]) {
    EXPECT_EQ(rank["optimizer"].get<int64_t>(), rank["master_weights"].get<int64_t>());  // half of 2 moments
    EXPECT_GT(rank["activations"].get<int64_t>(), 0);
  }
  EXPECT_TRUE(j["fits"].get<bool>());
}

nlohmann::json plan_json(const std::string& flags) {
  const testing::CommandResult r = testing::run_command(kPlan + flags + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

// Zero-bubble defers each linear layer's weight gradient with copies of its output gradient and input
// (nn/deferred_weight_grads): stage r of 4 holds those of up to r + 1 micro-batches, beside the 4 in
// flight (1f1b: 4 - r). gpt2-mini holds one block a stage, whose copies are 16 (B,T,C) floats: attention
// out C + C, qkv 3C + C, MLP out C + 4C, MLP in 4C + C. The plan used to leave them out, 10-39% of the
// measured peak (tests/parallel/mpi_memory_plan_test.cpp measures them).
TEST(PlanMemory, ZeroBubbleCountsTheDeferredWeightGradients) {
  const std::string flags =
      "--model gpt2-mini --vocab-size 4096 --seq-len 256 --batch-size 8 --micro-batch-size 2 --dtype fp32 --pp 4";
  const nlohmann::json zb = plan_json(flags + " --pipeline-schedule zero-bubble"), ofb = plan_json(flags);
  ASSERT_EQ(zb["ranks"].size(), 4u);
  const int64_t B = 2, T = 256, C = 192;
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const nlohmann::json &z = zb["ranks"][r], &o = ofb["ranks"][r];
    EXPECT_EQ(z["micro_batches_in_flight"], 4);
    EXPECT_EQ(o["micro_batches_in_flight"], 4 - r);
    EXPECT_EQ(z["micro_batches_deferred"], r + 1);
    EXPECT_EQ(o["micro_batches_deferred"], 0);
    const int64_t deferred = z["deferred_weight_grads"];
    EXPECT_EQ(deferred, 16 * B * T * C * 4);
    const int64_t per_micro_batch = z["activations"].get<int64_t>() + z["scratch"].get<int64_t>();
    EXPECT_EQ(z["total"].get<int64_t>(), o["total"].get<int64_t>() + r * per_micro_batch + (r + 1) * deferred);
  }
  const testing::CommandResult text = testing::run_command(kPlan + flags + " --pipeline-schedule zero-bubble");
  EXPECT_TRUE(testing::contains(text.output, "micro-batches with deferred dW")) << text.output;
  EXPECT_TRUE(testing::contains(text.output, "deferred dW copies per micro-batch")) << text.output;
}

// A train command line plans as it is: its tokenizer sets a preset's vocabulary (as in train), the
// flags that change no byte are accepted, and those the plan does not model say so.
TEST(PlanMemory, TakesTrainsFlagsAndTheTokenizersVocabulary) {
  const std::filesystem::path dir = testing::scratch_dir() / "plan_memory_tokenizer";
  std::filesystem::create_directories(dir);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  tokens.emplace_back(kEndOfText);
  Tokenizer(tokens, {}, {{std::string(kEndOfText), 256}}, "test").save_json(dir / "tokenizer.json");
  const std::string shape = "--model gpt2-mini --seq-len 64 --batch-size 2 --micro-batch-size 2";
  const nlohmann::json preset = plan_json(shape), sized = plan_json(shape + " --vocab-size 257");
  const std::string train_flags = " --tokenizer " + (dir / "tokenizer.json").string() +
                                  " --steps 1 --threads 1 --train-data 'x/train_*.bin' --val-data 'x/val_*.bin' "
                                  "--out-dir /nonexistent --lr 1e-3 --seed 3 --warmup 2 --quiet --no-overlap";
  const nlohmann::json pasted = plan_json(shape + train_flags);
  EXPECT_EQ(pasted["ranks"][0]["parameters"], sized["ranks"][0]["parameters"]);
  EXPECT_EQ(pasted["largest_total"], sized["largest_total"]);
  EXPECT_LT(pasted["largest_total"].get<int64_t>(), preset["largest_total"].get<int64_t>());
  EXPECT_TRUE(pasted["notes"].empty()) << pasted.dump();
  // --vocab-size wins over the tokenizer, as in train.
  EXPECT_EQ(plan_json(shape + train_flags + " --vocab-size 4096")["ranks"][0]["parameters"],
            plan_json(shape + " --vocab-size 4096")["ranks"][0]["parameters"]);
  const testing::CommandResult noted =
      testing::run_command(kPlan + shape + train_flags + " --fp8 hybrid");
  ASSERT_EQ(noted.exit_code, 0) << noted.output;
  EXPECT_TRUE(testing::contains(noted.output, "note: --fp8 hybrid is not planned")) << noted.output;
}

// A GPU plan of a model that runs on the CPU only (Gemma 2's soft caps, Qwen2-MoE's gate) says so; the CPU's
// plan does not.
TEST(PlanMemory, NotesAModelTheGpuCannotRun) {
  for (const char* model : {"gemma2-tiny", "qwen2-moe-tiny"}) {
    const std::string flags = std::string("--model ") + model + " --seq-len 32 --micro-batch-size 2";
    const testing::CommandResult gpu = testing::run_command(kPlan + flags);
    ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
    EXPECT_TRUE(testing::contains(gpu.output, "which no GPU kernel does yet")) << gpu.output;
    const testing::CommandResult cpu = testing::run_command(kPlan + flags + " --device cpu");
    ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
    EXPECT_FALSE(testing::contains(cpu.output, "no GPU kernel")) << cpu.output;
  }
}

// Expert parallelism: a rank's experts compute the rows the ep group routes to them. Dropless, the plan
// takes an even share (B·T·top_k) and says how much more twice that share holds; with a capacity it
// plans the bound (every expert's capacity from each ep rank). Without ep a rank computes its own
// tokens' rows, a capacity or not.
TEST(PlanMemory, ExpertParallelRowsAreAnEvenShareOrTheCapacity) {
  const std::string moe = "--model mixtral-mini --seq-len 64 --batch-size 4 --micro-batch-size 2 --dp 2";
  const nlohmann::json alone = plan_json(moe), capped_alone = plan_json(moe + " --moe-capacity-factor 1.25");
  EXPECT_EQ(alone["largest_total"], capped_alone["largest_total"]);
  EXPECT_TRUE(capped_alone["notes"].empty()) << capped_alone.dump();
  const nlohmann::json even = plan_json(moe + " --ep 2"), capped = plan_json(moe + " --ep 2 --moe-capacity-factor 2");
  EXPECT_GT(even["ranks"][0]["activations"].get<int64_t>(), alone["ranks"][0]["activations"].get<int64_t>());
  EXPECT_GT(capped["largest_total"].get<int64_t>(), even["largest_total"].get<int64_t>());
  ASSERT_EQ(even["notes"].size(), 1u) << even.dump();
  const std::string note = even["notes"][0];
  EXPECT_TRUE(testing::contains(note, "dropless routing under --ep 2: each rank's experts are planned at an even "
                                      "share of the routed rows"))
      << note;
  char extra[64];
  std::snprintf(extra, sizeof extra, "at twice that share it holds %.2f GiB more",
                double(capped["largest_total"].get<int64_t>() - even["largest_total"].get<int64_t>()) / (1 << 30));
  EXPECT_TRUE(testing::contains(note, extra)) << note;
  EXPECT_TRUE(capped["notes"].empty()) << capped.dump();
}

// --config: the run's own TOML file (train's keys) plans as the same flags on the command line do,
// flags given beside it win, and a key train does not know is refused with exit 2, as train refuses it.
TEST(PlanMemory, PlansTheRunsConfigFile) {
  const std::filesystem::path dir = testing::scratch_dir() / "plan_memory_config";
  std::filesystem::create_directories(dir);
  const std::string run = (dir / "run.toml").string(), bad = (dir / "bad.toml").string();
  testing::write_text(run,
                      "model = \"llama-mini\"\nbatch-size = 8\nmicro-batch-size = 2\nseq-len = 128\ndp = 2\n"
                      "zero = 1\nrecompute = \"selective\"\noptimizer-moments = \"bf16\"\n"
                      "steps = 5000\nwarmup = 100\nlr = 3e-4\ntrain-data = \"data/train_*.bin\"\n");
  const std::string flags = "--model llama-mini --batch-size 8 --seq-len 128 --dp 2 --zero 1 --recompute selective "
                            "--optimizer-moments bf16";
  const testing::CommandResult from_file = testing::run_command(kPlan + "--config " + run);
  const testing::CommandResult from_flags = testing::run_command(kPlan + flags + " --micro-batch-size 2");
  ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
  EXPECT_EQ(from_file.output, from_flags.output);
  EXPECT_TRUE(testing::contains(from_file.output, "dp 2, tp 1, pp 1, cp 1, ep 1; ZeRO 1; bf16; micro-batch 2 x 128 "
                                                  "tokens; recompute selective; bf16 AdamW moments"))
      << from_file.output;
  // Flags beside the file win, and a note on stderr names the keys they override.
  const testing::CommandResult overridden = testing::run_command(kPlan + "--config " + run + " --micro-batch-size 4 --json");
  ASSERT_EQ(overridden.exit_code, 0) << overridden.output;
  const std::string note = "tessera: note: flags on the command line override keys of '" + run +
                           "': --micro-batch-size (line 3)\n";
  ASSERT_TRUE(testing::contains(overridden.output, note)) << overridden.output;
  const std::string json = overridden.output.substr(0, overridden.output.find(note)) +
                           overridden.output.substr(overridden.output.find(note) + note.size());
  EXPECT_EQ(nlohmann::json::parse(json), plan_json(flags + " --micro-batch-size 4"));
  testing::write_text(bad, "model = \"llama-mini\"\nmicro-batch = 2\n");
  const testing::CommandResult refused = testing::run_command(kPlan + "--config " + bad);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(testing::contains(refused.output, "line 2: unknown key 'micro-batch' (did you mean 'micro-batch-size'?)"))
      << refused.output;
}

// A --resume run takes its checkpoint's shape, so its config (resume, out-dir, no model) plans that
// model, as train would run it: it planned the default gpt2-124m.
TEST(PlanMemory, PlansAResumedRunsCheckpointShape) {
  const std::filesystem::path dir = testing::scratch_dir() / "plan_memory_resume";
  std::filesystem::create_directories(dir);
  const std::string shard = testing::write_random_shard(dir, 4096, 256, 3).string();
  const std::string run = (dir / "run").string();
  const testing::CommandResult trained = testing::run_command(
      std::string(TESSERA_EXE) + " train --model llama-tiny --train-data " + shard +
      " --batch-size 2 --seq-len 16 --steps 1 --device cpu --quiet --out-dir " + run);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string config = (dir / "resume.toml").string();
  testing::write_text(config, "resume = true\nout-dir = \"" + run + "\"\nbatch-size = 2\nseq-len = 16\nsteps = 9\n");
  const nlohmann::json resumed = plan_json("--config " + config),
                       named = plan_json("--model llama-tiny --batch-size 2 --seq-len 16");
  EXPECT_EQ(resumed["ranks"][0]["parameters"], named["ranks"][0]["parameters"]);
  EXPECT_EQ(resumed["largest_total"], named["largest_total"]);
  EXPECT_TRUE(testing::contains(resumed["model"].get<std::string>(), "ckpt-00000001")) << resumed.dump();
}

// --device-memory-gb is printed as given, not rounded to whole GiB.
TEST(PlanMemory, PrintsAFractionalDeviceMemoryAsGiven) {
  const std::string flags = "--model gpt2-124m --seq-len 1024 --micro-batch-size 1 --reserve-gb 0 --device-memory-gb ";
  const testing::CommandResult half = testing::run_command(kPlan + flags + "2.5");
  EXPECT_TRUE(testing::contains(half.output, "GiB above --device-memory-gb 2.5;")) << half.output;
  const testing::CommandResult tiny = testing::run_command(kPlan + flags + "0.05");
  EXPECT_TRUE(testing::contains(tiny.output, "GiB above --device-memory-gb 0.05;")) << tiny.output;
  const testing::CommandResult fits = testing::run_command(kPlan + flags + "2.75");
  EXPECT_TRUE(testing::contains(fits.output, "of --device-memory-gb 2.75 (")) << fits.output;
}

// A GPU plan counts --reserve-gb (2 by default) for what is none of Tessera's allocations: the CUDA
// context, the libraries' handles, NCCL's buffers. A CPU plan is the allocator's alone.
TEST(PlanMemory, CountsTheGpusReserve) {
  const std::string flags = "--model gpt2-mini --seq-len 256 --batch-size 2";
  const nlohmann::json gpu = plan_json(flags), bare = plan_json(flags + " --reserve-gb 0"),
                       more = plan_json(flags + " --reserve-gb 3.5"), cpu = plan_json(flags + " --device cpu");
  EXPECT_EQ(gpu["ranks"][0]["reserved"], int64_t(2) << 30);
  EXPECT_EQ(gpu["largest_total"].get<int64_t>() - bare["largest_total"].get<int64_t>(), int64_t(2) << 30);
  EXPECT_EQ(more["ranks"][0]["reserved"], int64_t(7) << 29);
  EXPECT_EQ(cpu["ranks"][0]["reserved"], 0);
  const testing::CommandResult text = testing::run_command(kPlan + flags);
  char row[100];
  std::snprintf(row, sizeof row, "  %-34s%20.3f\n", "CUDA context, NCCL, libs (est.)", 2.0);
  EXPECT_TRUE(testing::contains(text.output, row)) << text.output;
  EXPECT_TRUE(testing::contains(text.output, "of --device-memory-gb 79.6 (")) << text.output;
}

TEST(PlanMemory, BadInputIsOneLineAndANonZeroExit) {
  testing::expect_one_line_errors(kPlan, {
      {"--model gpt2-124m --tp 8", "choose a --tp that divides 12"},
      {"--model gpt2-tiny --pp 3", "choose --pp ≤ 2"},
      {"--model gpt2-124m --zero 3 --pp 2 --pipeline-schedule zero-bubble", "with --zero 3, or --zero 1 with zero-bubble"},
      {"--model gpt2-124m --recompute some", "--recompute must be none, selective or full"},
      {"--model gpt2-124m --recompute full --recompute-layers 13", "give at most that"},
      {"--model gpt2-124m --seq-len 2048", "lower --seq-len"},
      {"--model gpt2-124m --dtype fp8", "--dtype must be auto, fp32, bf16 or fp16"},
      {"--model gpt2-124m --device-memory-gb 0", "--device-memory-gb must be a positive number"},
      {"--model gpt2-124m --reserve-gb -0.5", "--reserve-gb must not be negative, got -0.5"},
      {"--model gpt2-124m --batch-size 6 --micro-batch-size 4", "choose a micro-batch that divides"},
      {"--model gpt2-tiny --seq-len 64 --pp 2 --batch-size 20000000 --micro-batch-size 1",
       "20000000 micro-batches, more than a schedule of 2 pipeline chunks holds"},
      {"--model gpt4", "gpt2-124m"},
      {"--model gpt2-mini --seq-len 256 --device gpu", "--device must be auto, cuda or cpu, got 'gpu'"},
      {"--model gpt2-mini --seq-len 256 --fp8 fp9", "--fp8 must be off, hybrid"},
      {"--model gpt2-mini --seq-len 256 --tokenizer /nonexistent.json", "tokenizer path /nonexistent.json does not exist"},
  });
}

}  // namespace
}  // namespace tessera
