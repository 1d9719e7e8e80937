// tessera launch: a failed job runs again (up to --max-restarts), and a two-rank training job whose
// ranks are killed twice at random steps ends with the weights of a run that was never disturbed.
#include <gtest/gtest.h>

#include <set>

#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

const std::string kTessera = std::string(TESSERA_EXE);

TEST(Launch, RestartsAFailedJobUntilItSucceedsOrRestartsRunOut) {
  const fs::path dir = testing::scratch_dir();
  // Fails on its first two runs, succeeds on the third.
  const std::string job = "sh -c 'n=$(cat " + (dir / "n").string() + " 2>/dev/null || echo 0); echo $((n+1)) > " +
                          (dir / "n").string() + "; [ $n -ge 2 ]'";
  testing::CommandResult ok = testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 3 -- " + job);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(testing::read_text(dir / "n"), "3\n");
  EXPECT_TRUE(testing::contains(ok.output, "restart 2 of 3")) << ok.output;
  fs::remove(dir / "n");
  testing::CommandResult out = testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 1 -- " + job);
  EXPECT_EQ(out.exit_code, 1) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "no restarts are left")) << out.output;
}

// The warning that a restart starts over is for a command that does not resume: --resume inside a
// wrapper's command string, or resume = true in the job's --config file, resumes.
TEST(Launch, WarnsOnlyWhenTheCommandDoesNotResume) {
  const fs::path dir = testing::scratch_dir();
  const std::string warning = "a restart begins again at step 0";
  testing::write_text(dir / "resumes.toml", "resume = true\n");
  testing::write_text(dir / "fresh.toml", "steps = 3\n");
  const auto launched = [](const std::string& job) {
    return testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 0 -- " + job).output;
  };
  EXPECT_FALSE(testing::contains(launched("true --config " + (dir / "resumes.toml").string()), warning));
  EXPECT_FALSE(testing::contains(launched("true --config=" + (dir / "resumes.toml").string()), warning));
  EXPECT_FALSE(testing::contains(launched("sh -c 'true --resume'"), warning));
  EXPECT_TRUE(testing::contains(launched("true --config " + (dir / "fresh.toml").string()), warning));
  EXPECT_TRUE(testing::contains(launched("true"), warning));
}

TEST(Launch, KilledRanksCostNothingButTime) {
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 9).string();
  auto job = [&](const std::string& out) {
    return "env OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 " + kTessera +
           " train --quiet --model gpt2-tiny --device cpu --train-data " + shard +
           " --batch-size 4 --seq-len 16 --steps 40 --checkpoint-every 1 --comm-timeout 30 --dp 2 --zero 1 --resume"
           " --out-dir " + (dir / out).string();
  };
  const testing::CommandResult straight = testing::run_command(job("straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  // Kill one rank (SIGKILL) once 5 and again once 25 metrics lines are written; only this test's
  // ranks match (other tests run tessera at the same time).
  const std::string metrics = (dir / "run" / "metrics.jsonl").string();
  const std::string killer =
      "( for at in 5 25; do while [ \"$(cat " + metrics + " 2>/dev/null | wc -l)\" -lt $at ]; do sleep 0.02; done; "
      "pkill -9 -n -f '^" + kTessera + " train .*--out-dir " + (dir / "run").string() + "$'; done ) & ";
  const testing::CommandResult supervised = testing::run_command(
      "{ " + killer + kTessera + " launch --restart-delay 0 --max-restarts 4 -- " + job("run") +
      "; code=$?; wait; exit $code; }");
  ASSERT_EQ(supervised.exit_code, 0) << supervised.output;
  EXPECT_TRUE(testing::contains(supervised.output, "restart 2 of 4")) << supervised.output;
  // Steps after the last checkpoint of a killed job run again, reading the same batches: every
  // line's batch is its step's, and every step 1..40 was trained.
  std::set<int64_t> steps;
  for (const nlohmann::json& line : testing::read_metrics(dir / "run" / "metrics.jsonl")) {
    EXPECT_EQ(line["batch"].get<int64_t>(), line["step"].get<int64_t>() - 1) << line.dump();
    steps.insert(line["step"].get<int64_t>());
  }
  EXPECT_EQ(steps.size(), 40u);
  EXPECT_TRUE(testing::checkpoint_tensors(dir / "run" / "ckpt-latest") ==
              testing::checkpoint_tensors(dir / "straight" / "ckpt-latest"));
}

}  // namespace
}  // namespace tessera
