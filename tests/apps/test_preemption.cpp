// Preemption: SIGTERM to a training run finishes the step, saves a checkpoint and exits 0, and the
// resumed run ends with the same weights, bit for bit, as a run that was never interrupted.
#include <gtest/gtest.h>

#include "checkpoint/run_folder.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

std::string train_command(const fs::path& dir, const std::string& out, int64_t steps) {
  // A constant schedule: the learning rate of step k does not depend on --steps.
  return "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) +
         " train --model gpt2-tiny --quiet --device cpu --batch-size 2 --seq-len 16 --lr-schedule constant "
         "--train-data " + (dir / "train_000000.bin").string() + " --out-dir " + (dir / out).string() +
         " --steps " + std::to_string(steps);
}

TEST(Preemption, SigtermSavesExitsZeroAndResumesBitwise) {
  const fs::path dir = testing::scratch_dir();
  testing::write_random_shard(dir, 8192, 256, 5);
  // Signal once a few steps are in, then wait for the run to end.
  const testing::CommandResult stopped = testing::run_command(
      "( " + train_command(dir, "run", 1000000) + " & pid=$!; "
      "while [ \"$(cat " + (dir / "run" / "metrics.jsonl").string() + " 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.02; done; "
      "kill -TERM $pid; wait $pid; echo \"exit=$?\" )");
  ASSERT_TRUE(testing::contains(stopped.output, "exit=0")) << stopped.output;
  EXPECT_TRUE(testing::contains(stopped.output, "stopped by SIGTERM after step")) << stopped.output;
  const auto lines = testing::read_metrics(dir / "run" / "metrics.jsonl");
  const int64_t step = lines.back()["step"].get<int64_t>();
  ASSERT_GE(step, 3);
  ASSERT_TRUE(fs::exists(dir / "run" / checkpoint_dir_name(step) / "model.safetensors")) << "step " << step;

  // Three more steps after resuming equal an uninterrupted run of step + 3.
  const testing::CommandResult resumed = testing::run_command(train_command(dir, "run", step + 3) + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const testing::CommandResult straight = testing::run_command(train_command(dir, "straight", step + 3));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  // The data order continued exactly: every step 1..step+3 once, each reading global batch step - 1.
  const auto all = testing::read_metrics(dir / "run" / "metrics.jsonl");
  ASSERT_EQ(all.size(), size_t(step + 3));
  for (size_t s = 0; s < all.size(); ++s) {
    EXPECT_EQ(all[s]["step"].get<int64_t>(), int64_t(s) + 1);
    EXPECT_EQ(all[s]["batch"].get<int64_t>(), int64_t(s)) << "step " << s + 1;
  }
  EXPECT_TRUE(testing::checkpoint_tensors(dir / "run" / "ckpt-latest") ==
              testing::checkpoint_tensors(dir / "straight" / "ckpt-latest"));
}

}  // namespace
}  // namespace tessera
