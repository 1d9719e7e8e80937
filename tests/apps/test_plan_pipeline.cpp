// `tessera plan pipeline` end to end: a schedule's timeline with its bubble beside the textbook
// value, an SVG when asked, a model's cost-balanced stages; bad input (an unknown schedule, more
// chunks than blocks, micro-batches the interleaved schedule cannot group) ends in one
// "tessera: error:" line naming the fix, a non-zero exit and nothing else printed.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/test_support.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

const std::string kPlan = std::string(TESSERA_EXE) + " plan pipeline ";

TEST(PlanPipeline, PrintsTheTimelineBubbleAndStages) {
  const fs::path svg = testing::scratch_dir() / "gpipe.svg";
  const testing::CommandResult r =
      testing::run_command(kPlan + "--pp 4 --microbatches 8 --schedule gpipe --model gpt2-124m --svg " + svg.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "rank 3 |...FFFFFFFF")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "bubble: 0.2727 of the ranks' time (textbook 0.2727)")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "micro-batches in flight at most, per rank: 8 8 8 8")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "chunk 3 (rank 3): blocks 11-11 + head")) << r.output;
  EXPECT_TRUE(fs::file_size(svg) > 0);
}

TEST(PlanPipeline, BadInputIsOneLineAndANonZeroExit) {
  testing::expect_one_line_errors(kPlan, {
      {"--schedule zb", "choose gpipe, 1f1b, interleaved or zero-bubble"},
      {"--pp 8 --model gpt2-mini", "use at most 4 chunks"},
      {"--pp 4 --microbatches 6 --virtual-stages 2 --schedule interleaved", "use 4 or 8 micro-batches"},
      {"--pp 4 --virtual-stages 2 --schedule 1f1b", "--pipeline-schedule interleaved"},
      {"--pp 3 --model gpt2-mini --pipeline-boundaries 2,1", "strictly increasing"},
      {"--pp 2 --microbatches 2000000000", "use fewer micro-batches"},  // it used to fill memory for minutes
      // A stage holds a block at least, and no model has more than 10000: --pp 30000 used to run 85 s.
      {"--pp 100000 --microbatches 1", "more pipeline chunks than the 10000 blocks"},
      {"--pp 5000 --virtual-stages 3 --schedule interleaved --microbatches 5000", "use fewer stages"},
  });
}

}  // namespace
}  // namespace tessera
