// `tessera bench train` end to end: --config takes the run's own `tessera train --config` file and
// benches one process's step of that run (its model, a data-parallel rank's micro-batch and
// accumulation, sequence length, recomputation), with the command line's flags winning and train's
// key errors (exit 2); a layout one process cannot time is refused. The JSON's FLOPs per token are
// the hand-computed figure, its MFU the tokens/s times that over the peak, and its phases fit in its step.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {

const std::string kBench = std::string(TESSERA_EXE) + " bench train --device cpu --steps 1 --warmup 1 ";

// The JSON line of a bench run's output (notes go to stderr, which run_command mixes in).
nlohmann::json bench_json(const std::string& flags) {
  const testing::CommandResult r = testing::run_command(kBench + flags + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t open = r.output.find("\n{") == std::string::npos ? r.output.find('{') : r.output.find("\n{") + 1;
  EXPECT_NE(open, std::string::npos) << r.output;
  return nlohmann::json::parse(r.output.substr(open, r.output.find('\n', open) - open));
}

std::string write_config(const std::string& name, const std::string& text) {
  const std::filesystem::path dir = testing::scratch_dir() / "bench_train_config";
  std::filesystem::create_directories(dir);
  testing::write_text(dir / name, text);
  return (dir / name).string();
}

TEST(BenchTrainConfig, BenchesOneDataParallelRanksStepOfTheRun) {
  const std::string run = write_config("run.toml",
                                       "model = \"gpt2-tiny\"\nbatch-size = 8\nmicro-batch-size = 2\nseq-len = 16\n"
                                       "dp = 2\nrecompute = \"selective\"\nsteps = 5000\nwarmup = 100\n"
                                       "train-data = \"data/train_*.bin\"\nthreads = 1\n");
  const nlohmann::json j = bench_json("--config " + run);
  EXPECT_EQ(j["model"], "gpt2-tiny");
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["grad_accum"], 2);  // 8 sequences over 2 data-parallel ranks, 2 at a time
  EXPECT_EQ(j["seq_len"], 16);
  EXPECT_EQ(j["recompute"], "selective");
  EXPECT_EQ(j["steps"], 1);  // the file's steps and warmup are the run's
  EXPECT_EQ(j["warmup"], 1);
  // The command line wins.
  const nlohmann::json k = bench_json("--config " + run + " --micro-batch-size 4 --recompute none");
  EXPECT_EQ(k["batch"], 4);
  EXPECT_EQ(k["grad_accum"], 1);
  EXPECT_EQ(k["recompute"], "none");
  const testing::CommandResult text = testing::run_command(kBench + "--config " + run);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_TRUE(testing::contains(text.output, "has --dp 2: this is one data-parallel rank's step (4 of the batch's 8 "
                                             "sequences)"))
      << text.output;
  EXPECT_TRUE(testing::contains(text.output, "B=2 T=16 x2 accumulation, recompute selective")) << text.output;
}

// A resumed run's config names no model: the bench takes the checkpoint's, as train does.
TEST(BenchTrainConfig, BenchesAResumedRunsModel) {
  const std::filesystem::path dir = testing::scratch_dir() / "bench_train_resume";
  std::filesystem::create_directories(dir);
  const std::string shard = testing::write_random_shard(dir, 4096, 256, 3).string();
  const std::string run = (dir / "run").string();
  const testing::CommandResult trained = testing::run_command(
      std::string(TESSERA_EXE) + " train --model llama-tiny --train-data " + shard +
      " --batch-size 2 --seq-len 16 --steps 1 --device cpu --quiet --out-dir " + run);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string config = (dir / "resume.toml").string();  // (scratch_dir() again would empty the folder)
  testing::write_text(config, "resume = true\nout-dir = \"" + run + "\"\nbatch-size = 2\nseq-len = 16\n");
  const nlohmann::json j = bench_json("--config " + config);
  const nlohmann::json llama = bench_json("--model llama-tiny --seq-len 16 --micro-batch-size 2");
  EXPECT_EQ(j["num_params"], llama["num_params"]);
  EXPECT_EQ(j["flops_per_token"], llama["flops_per_token"]);
  EXPECT_TRUE(testing::contains(j["model"].get<std::string>(), "ckpt-00000001")) << j.dump();
}

TEST(BenchTrainConfig, RefusesWhatTrainRefusesAndLayoutsOfSeveralProcesses) {
  const std::string unknown = write_config("unknown.toml", "model = \"gpt2-tiny\"\nbench-steps = 3\n");
  testing::CommandResult r = testing::run_command(kBench + "--config " + unknown);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "line 2: unknown key 'bench-steps'")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "keys are the flag names of 'train'")) << r.output;
  const std::string typed = write_config("typed.toml", "model = \"gpt2-tiny\"\nsteps = 1.5\n");
  r = testing::run_command(kBench + "--config " + typed);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "key 'steps' takes a whole number")) << r.output;
  const std::string uneven = write_config("uneven.toml", "model = \"gpt2-tiny\"\nseq-len = 16\nbatch-size = 8\ndp = 3\n");
  r = testing::run_command(kBench + "--config " + uneven);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "is not a multiple of --dp 3 x --micro-batch-size 2")) << r.output;
  const std::string tp = write_config("tp.toml", "model = \"gpt2-tiny\"\nseq-len = 16\ntp = 2\n");
  r = testing::run_command(kBench + "--config " + tp);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "lays the run out over tp 2, pp 1, cp 1, ep 1, and bench train times one "
                                          "process"))
      << r.output;
  EXPECT_FALSE(testing::contains(r.output, "ms/step")) << r.output;
}

// gpt2-tiny (tied; L 2, C 32, vocabulary 256, context 64): wte 8,192, wpe 2,048, final LayerNorm 64; a
// block 2·64 + (32·96 + 96) + (32·32 + 32) + (32·128 + 128) + (128·32 + 32) = 12,704. N = 35,712;
// at T = 16: 6·N = 214,272 and 6·2·32·16 = 6,144.
TEST(BenchTrainConfig, FlopsPerTokenAndMfuAreTheFormulas) {
  const nlohmann::json j = bench_json("--model gpt2-tiny --seq-len 16 --micro-batch-size 2 --peak-tflops 0.001");
  EXPECT_EQ(j["num_params"], 35'712);
  EXPECT_EQ(j["flops_params"], 35'712);
  EXPECT_DOUBLE_EQ(j["flops_per_token"].get<double>(), 220'416.0);
  const double tokens_per_s = j["tokens_per_s"];
  EXPECT_NEAR(tokens_per_s * j["ms_per_step"].get<double>() / 1e3, 2.0 * 16, 1e-6);
  EXPECT_NEAR(j["mfu"].get<double>(), tokens_per_s * 220'416.0 / 1e9, 1e-9 * tokens_per_s * 220'416.0 / 1e9);
  // One timed step: its phases are disjoint parts of it (the rest is zeroing the gradients, and on a busy
  // machine the waits between them).
  const double phases = j["forward_ms"].get<double>() + j["backward_ms"].get<double>() + j["optimizer_ms"].get<double>();
  EXPECT_LE(phases, j["ms_per_step"].get<double>());
  EXPECT_GT(phases, 0.0);
}

}  // namespace
}  // namespace tessera
