// Crash safety of saves (DESIGN.md invariant 4) under kill -9: runs that save a checkpoint every step
// (half of them in the background, --async-checkpoint) are killed at random moments, alternately one
// process and one rank of a 2-rank dp2·ZeRO-1 job, all resuming in one run folder. After every kill, the checkpoint --resume picks loads in full (weights
// and every moment, from however many shards wrote it), and the next run resumes from it.
#include <gtest/gtest.h>

#include <random>

#include "checkpoint/run_folder.h"
#include "checkpoint/train_checkpoint.h"
#include "nn/decoder_layout.h"
#include "optim/adamw_optimizer.h"
#include "parallel/train_runs.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

// Loads everything of the checkpoint --resume would continue from (none before the first save).
void expect_resume_point_loads(const fs::path& run, int trial) {
  const ResumePoint point = choose_resume_checkpoint(run);
  if (!point.checkpoint) return;
  Decoder model(read_checkpoint_model_config(*point.checkpoint));
  load_checkpoint(*point.checkpoint, model);
  load_optimizer_state(*point.checkpoint, model.layout(), full_segments(model.layout()));
  SUCCEED() << "trial " << trial << ": " << point.checkpoint->filename();
}

}  // namespace

TEST(KillDuringSave, TheCheckpointResumeFindsAlwaysLoads) {
  const fs::path dir = testing::scratch_dir(), run = dir / "run";
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 23).string();
  std::mt19937 rng(std::random_device{}());
  constexpr int kTrials = 22;
  int interrupted_saves = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const bool two_ranks = trial % 2 == 1;
    const Layout layout = two_ranks ? Layout{2, 2, 1, 2} : Layout{1, 1, 0, 2};
    // mpirun takes about half a second to start its ranks; a lone process a few milliseconds.
    const double delay = std::uniform_real_distribution<double>(two_ranks ? 0.6 : 0.05, two_ranks ? 1.4 : 0.6)(rng);
    // Every other pair of trials writes in the background (--async-checkpoint): a kill then lands in
    // a write that overlaps the next steps.
    const bool async = trial % 4 >= 2;
    const std::string cmd = train_command(layout, run, shard,
                                          std::string("--steps 1000000 --checkpoint-every 1 --lr-schedule constant "
                                                      "--resume") + (async ? " --async-checkpoint" : ""));
    // The victim: the process itself, or one rank of the job, chosen at random (never mpirun).
    const std::string victim = "$(pgrep -f '^" + std::string(TESSERA_EXE) + " train .*--out-dir " + run.string() +
                               "$' | shuf -n 1)";
    const testing::CommandResult r = testing::run_command(
        "( " + cmd + " > " + (dir / "log").string() + " 2>&1 & pid=$!; sleep " + std::to_string(delay) +
        "; kill -9 " + victim + "; wait $pid; grep 'tessera: error' " + (dir / "log").string() + " )");
    // A lone process dies silently; a job's surviving rank may report its peer's death, which is fine.
    if (!two_ranks) {
      EXPECT_EQ(r.output.find("tessera: error"), std::string::npos) << "trial " << trial << ": " << r.output;
    }
    if (!fs::exists(run)) continue;  // killed before it made its run folder (a loaded machine): nothing to load
    for (const fs::directory_entry& e : fs::directory_iterator(run))
      interrupted_saves += e.path().filename().string().ends_with(".tmp");
    expect_resume_point_loads(run, trial);
  }
  EXPECT_FALSE(list_checkpoints(run).empty());
  std::printf("%d trials, %d left a save's temporary folder behind\n", kTrials, interrupted_saves);
}

}  // namespace tessera
