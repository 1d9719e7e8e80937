// Preemption: SIGTERM to a training run is acknowledged at once, finishes the step, saves a
// checkpoint and exits 0, and the resumed run ends with the same weights, bit for bit, as a run
// that was never interrupted.
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
  // Said the moment it came, once: a step may take minutes.
  const std::string heard = "tessera: SIGTERM received: finishing the current step";
  EXPECT_TRUE(testing::contains(stopped.output, heard)) << stopped.output;
  EXPECT_EQ(stopped.output.find(heard), stopped.output.rfind(heard)) << stopped.output;
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

// A stop request during the set-up (here as soon as the process handles SIGTERM, while it starts MPI,
// builds the model and scans the data) ends it before training: one line, exit 0, nothing written.
// Under launch and mpirun, SIGUSR1 reaches every rank; the job exits 0 and is not restarted.
TEST(Preemption, AStopDuringSetUpEndsItCleanly) {
  const fs::path dir = testing::scratch_dir();
  testing::write_random_shard(dir, 8192, 256, 5);
  // gpt2-124m's width on two blocks: a set-up of a fraction of a second, long beside the wait below.
  const std::string flags = " --model gpt2-124m --layers 2 --vocab-size 256 --quiet --device cpu --batch-size 2 "
                            "--seq-len 16 --steps 40 --checkpoint-every 10 --resume --train-data " +
                            (dir / "train_000000.bin").string() + " --out-dir ";
  // Waits until every process of `pattern` (at least `count`) has its SIGTERM handler (SigCgt bit 15).
  const auto handled = [](const std::string& pattern, int count) {
    return "until [ $(for p in $(pgrep -f '" + pattern + "'); do m=$(awk '/SigCgt/{print $2}' /proc/$p/status "
           "2>/dev/null); [ -n \"$m\" ] && [ $(( 0x$m & 0x4000 )) -ne 0 ] && echo $p; done | wc -l) -ge " +
           std::to_string(count) + " ]; do sleep 0.005; done";
  };
  const std::string alone = (dir / "alone").string(), ranks = std::string("^") + TESSERA_EXE + " train .* --out-dir ";
  const testing::CommandResult stopped = testing::run_command(
      "( OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " train" + flags + alone + " & pid=$!; " +
      handled(ranks + alone + "$", 1) + "; kill -TERM $pid; wait $pid; echo \"exit=$?\" )");
  EXPECT_TRUE(testing::contains(stopped.output, "exit=0")) << stopped.output;
  EXPECT_TRUE(testing::contains(stopped.output, "stopped by SIGTERM during set-up, before training: nothing to save"))
      << stopped.output;
  EXPECT_FALSE(fs::exists(fs::path(alone) / "metrics.jsonl"));

  const std::string run = (dir / "job").string();
  const testing::CommandResult launched = testing::run_command(
      "( " + std::string(TESSERA_EXE) + " launch --restart-delay 0 --max-restarts 3 -- env OMP_NUM_THREADS=1 mpirun "
      "--oversubscribe --allow-run-as-root -np 2 " + std::string(TESSERA_EXE) + " train" + flags + run + " & pid=$!; " +
      handled(ranks + run + "$", 2) + "; kill -TERM $pid; wait $pid; echo \"exit=$?\" )");
  EXPECT_TRUE(testing::contains(launched.output, "exit=0")) << launched.output;
  EXPECT_TRUE(testing::contains(launched.output, "stopped by SIGUSR1 during set-up, before training: nothing to save"))
      << launched.output;
  EXPECT_FALSE(testing::contains(launched.output, "restart 1")) << launched.output;
  EXPECT_FALSE(fs::exists(fs::path(run) / "metrics.jsonl"));
}

}  // namespace
}  // namespace tessera
