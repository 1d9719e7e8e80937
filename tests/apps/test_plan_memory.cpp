// `tessera plan memory` end to end: the table of bytes per pipeline stage with the verdict against
// --device-memory-gb (and the single flag changes that would fit), the same as JSON; bad input (a
// layout that does not divide the model, flags out of range) ends in one "tessera: error:" line
// naming the flag and the fix, and a non-zero exit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/test_support.h"

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
      {"--model gpt2-124m --batch-size 6 --micro-batch-size 4", "choose a micro-batch that divides"},
      {"--model gpt2-tiny --seq-len 64 --pp 2 --batch-size 20000000 --micro-batch-size 1",
       "20000000 micro-batches, more than a schedule of 2 pipeline chunks holds"},
      {"--model gpt4", "gpt2-124m"},
  });
}

}  // namespace
}  // namespace tessera
