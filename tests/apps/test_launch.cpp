// tessera launch: a failed job runs again (up to --max-restarts), a refused command line does not; a
// stop signal reaches the job as SIGUSR1 (save and stop), a second as SIGTERM; a two-rank training
// job under mpirun stopped through launch saves and exits 0; and a two-rank training job whose ranks
// are killed twice at random steps ends with the weights of a run that was never disturbed.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <utility>

#include "checkpoint/run_folder.h"
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

// --restart-window: failures further apart than the window never use the restarts up (a job of weeks
// that fails once a day), failures within it do (a job that keeps failing).
TEST(Launch, CountsOnlyTheFailuresOfTheRestartWindow) {
  const fs::path dir = testing::scratch_dir();
  // Fails on its first three runs, each after 1.2 s; succeeds on the fourth.
  const std::string job = "sh -c 'n=$(cat " + (dir / "n").string() + " 2>/dev/null || echo 0); echo $((n+1)) > " +
                          (dir / "n").string() + "; [ $n -ge 3 ] || { sleep 1.2; exit 1; }'";
  testing::CommandResult apart =
      testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 1 --restart-window 1 -- " + job);
  EXPECT_EQ(apart.exit_code, 0) << apart.output;
  EXPECT_EQ(testing::read_text(dir / "n"), "4\n");
  EXPECT_TRUE(testing::contains(apart.output, "restart 1 of 1 in the last")) << apart.output;
  fs::remove(dir / "n");
  testing::CommandResult within =
      testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 1 --restart-window 60 -- " + job);
  EXPECT_EQ(within.exit_code, 1) << within.output;
  EXPECT_EQ(testing::read_text(dir / "n"), "2\n");
  EXPECT_TRUE(testing::contains(within.output, "no restarts are left (2 failures in the last")) << within.output;
  testing::CommandResult negative = testing::run_command(kTessera + " launch --restart-window -1 -- true");
  EXPECT_EQ(negative.exit_code, 2) << negative.output;
  EXPECT_TRUE(testing::contains(negative.output, "--restart-window must be between 0 and")) << negative.output;
}

// A flag tessera refuses (exit 109), a usage error (2) or a command that is not there (127) fails the
// same way every time: one try, and a line saying why there is no restart.
TEST(Launch, DoesNotRestartARefusedCommandLine) {
  for (const auto& [job, code] : {std::pair{kTessera + " train --no-such-flag --resume", 109},
                                  {std::string("sh -c 'exit 2'"), 2},
                                  {std::string("/no/such/program --resume"), 127}}) {
    const testing::CommandResult out =
        testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 3 -- " + job);
    EXPECT_EQ(out.exit_code, code) << out.output;
    EXPECT_TRUE(testing::contains(out.output, "would be again; not restarting")) << out.output;
    EXPECT_FALSE(testing::contains(out.output, "restart 1 of 3")) << out.output;
  }
}

// A configuration tessera refuses after reading it (a value no flag check catches, a layout the world
// does not allow, in a --config file or on the command line, alone or under mpirun) exits 2 as a bad
// flag does, so launch tries it once.
TEST(Launch, DoesNotRestartAConfigurationRefusedAtStartUp) {
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 4096, 256, 9).string();
  testing::write_text(dir / "bad.toml", "lr-schedule = \"cosinus\"\n");
  const std::string train = kTessera + " train --quiet --model gpt2-tiny --device cpu --batch-size 4 --seq-len 16 "
                            "--steps 2 --resume --checkpoint-every 1 --train-data " + shard + " --out-dir " +
                            (dir / "run").string();
  for (const auto& [job, needle] :
       {std::pair{train + " --config " + (dir / "bad.toml").string(), std::string("(from --config: lr-schedule on line 1")},
        {train + " --dp 3", "--dp 3"},
        {"env OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 " + train + " --dp 3", "--dp 3"}}) {
    const testing::CommandResult out =
        testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 2 -- " + job);
    EXPECT_EQ(out.exit_code, 2) << out.output;
    EXPECT_TRUE(testing::contains(out.output, needle)) << out.output;
    EXPECT_TRUE(testing::contains(out.output, "would be again; not restarting")) << out.output;
    EXPECT_FALSE(testing::contains(out.output, "restart 1 of 2")) << out.output;
  }
}

// A failed job's processes that outlive it (here one in a session of its own, as mpirun's ranks are in
// process groups of their own, left running when mpirun is killed) are ended before the restart: they
// would hold the run folder's lock, refusing the restarted job, or go on writing into it.
TEST(Launch, EndsWhatAFailedJobLeftRunningBeforeItRestarts) {
  const fs::path dir = testing::scratch_dir();
  const std::string left = (dir / "left").string();
  // The first run leaves `sleep` behind and fails; the second succeeds only if that sleep is gone.
  const std::string job = "sh -c 'if [ -e " + left + " ]; then ! kill -0 $(cat " + left + ") 2>/dev/null; else "
                          "setsid sleep 30 > /dev/null 2>&1 & echo $! > " + left + "; exit 1; fi'";
  const testing::CommandResult out =
      testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 1 -- " + job);
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "ended 1 process (pid " + testing::read_text(left).substr(0, testing::read_text(left).size() - 1) +
                                            ") that the job left running"))
      << out.output;
  EXPECT_TRUE(testing::contains(out.output, "the job failed (exit 1) after ")) << out.output;
}

// A job that records the signals it gets (sh runs a trap once its sleep ends) and says when it runs.
std::string signal_recording_job(const fs::path& dir) {
  const std::string log = (dir / "signals").string();
  return "sh -c 'trap \"echo USR1 >> " + log + "\" USR1; trap \"echo TERM >> " + log + "; exit 143\" TERM; touch " +
         (dir / "running").string() + "; while :; do sleep 0.02; done'";
}

// Runs `launch` in the background, waits until its job runs, then `then` (shell, $pid is launch's).
testing::CommandResult launch_and(const fs::path& dir, const std::string& launch, const std::string& then) {
  return testing::run_command("( " + launch + " & pid=$!; while [ ! -e " + (dir / "running").string() +
                              " ]; do sleep 0.02; done; " + then + "; wait $pid; echo \"exit=$?\" )");
}

TEST(Launch, PassesAStopAsSigusr1AndASecondAsSigterm) {
  const fs::path dir = testing::scratch_dir();
  const testing::CommandResult out =
      launch_and(dir, kTessera + " launch --restart-delay 0 --max-restarts 3 -- " + signal_recording_job(dir),
                 "kill -TERM $pid; sleep 0.3; kill -INT $pid");
  EXPECT_TRUE(testing::contains(out.output, "exit=143")) << out.output;
  EXPECT_EQ(testing::read_text(dir / "signals"), "USR1\nTERM\n");
  EXPECT_TRUE(testing::contains(out.output, "SIGTERM: asked the job to save a checkpoint and stop")) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "a second signal: ending the job")) << out.output;
  EXPECT_FALSE(testing::contains(out.output, "restart 1")) << out.output;
}

// A launcher may drop a stop that comes while it starts its ranks (mpirun forwards it to none): launch
// asks again while the job runs. This job ignores SIGUSR1 for its first second, then stops on it.
TEST(Launch, AsksAgainWhenTheJobDidNotTakeTheStop) {
  const fs::path dir = testing::scratch_dir();
  const auto start = std::chrono::steady_clock::now();
  const testing::CommandResult out = launch_and(
      dir, kTessera + " launch --restart-delay 0 --max-restarts 3 -- sh -c 'trap \"\" USR1; touch " +
               (dir / "running").string() + "; sleep 1; trap \"exit 0\" USR1; i=0; while [ $i -lt 200 ]; do sleep "
               "0.05; i=$((i+1)); done; exit 3'",
      "kill -TERM $pid");
  EXPECT_TRUE(testing::contains(out.output, "exit=0")) << out.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  EXPECT_FALSE(testing::contains(out.output, "restart 1")) << out.output;
}

// A signal while launch waits to restart ends it at once, without another try.
TEST(Launch, AStopDuringTheRestartDelayEndsTheSupervision) {
  const fs::path dir = testing::scratch_dir();
  const auto start = std::chrono::steady_clock::now();
  const testing::CommandResult out = launch_and(
      dir, kTessera + " launch --restart-delay 60 --max-restarts 3 -- sh -c 'touch " + (dir / "running").string() +
               "; exit 1'",
      "sleep 0.3; kill -INT $pid");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(testing::contains(out.output, "exit=1")) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "SIGINT before the restart: not restarting")) << out.output;
}

// mpirun kills its ranks a second after passing on SIGTERM, before a large checkpoint is written;
// SIGUSR1 it passes on and waits. Through launch, every rank saves and the job exits 0.
TEST(Launch, AStopReachesEveryRankUnderMpirunWhichSavesAndExitsZero) {
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 9).string();
  const fs::path run = dir / "run";
  const std::string job = "env OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 " + kTessera +
                          " train --quiet --model gpt2-tiny --device cpu --train-data " + shard +
                          " --batch-size 4 --seq-len 16 --steps 1000000 --dp 2 --resume --out-dir " + run.string();
  const testing::CommandResult out = testing::run_command(
      "( " + kTessera + " launch --restart-delay 0 --max-restarts 3 -- " + job + " & pid=$!; while [ \"$(cat " +
      (run / "metrics.jsonl").string() + " 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.02; done; kill -TERM $pid; "
      "wait $pid; echo \"exit=$?\" )");
  ASSERT_TRUE(testing::contains(out.output, "exit=0")) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "stopped by SIGUSR1 after step")) << out.output;
  const int64_t step = testing::read_metrics(run / "metrics.jsonl").back()["step"].get<int64_t>();
  EXPECT_EQ(fs::read_symlink(run / "ckpt-latest"), fs::path(checkpoint_dir_name(step)));
  EXPECT_TRUE(fs::exists(run / checkpoint_dir_name(step) / "shard-00001-of-00002.safetensors"));
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

// A job that saves only at its end loses everything to a failure: launch says so, unless the command
// or its --config file sets --checkpoint-every above 0.
TEST(Launch, WarnsWhenTheCommandSavesOnlyAtItsEnd) {
  const fs::path dir = testing::scratch_dir();
  const std::string warning = "saves a checkpoint only at its end";
  testing::write_text(dir / "saves.toml", "checkpoint-every = 500\n");
  const auto launched = [](const std::string& job) {
    return testing::run_command(kTessera + " launch --restart-delay 0 --max-restarts 0 -- " + job).output;
  };
  EXPECT_FALSE(testing::contains(launched("true --checkpoint-every 100 --resume"), warning));
  EXPECT_FALSE(testing::contains(launched("true --checkpoint-every=100"), warning));
  EXPECT_FALSE(testing::contains(launched("sh -c 'true --checkpoint-every 5; true'"), warning));
  EXPECT_FALSE(testing::contains(launched("true --config " + (dir / "saves.toml").string()), warning));
  EXPECT_TRUE(testing::contains(launched("true --resume"), warning));
  EXPECT_TRUE(testing::contains(launched("true --checkpoint-every 0 --resume"), warning));
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
