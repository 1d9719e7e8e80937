// When a stop request takes effect: one during the set-up ends it before any training (nothing to
// save; StoppedDuringSetup), and one that comes while a step's checkpoint is being saved stops the run
// right after that save, not after another step and another save.
#include <gtest/gtest.h>

#include <csignal>

#include "checkpoint/run_folder.h"
#include "support/test_support.h"
#include "train/stop_signal.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

TEST(StopTiming, ARequestDuringSetUpEndsItBeforeTrainingWithNothingWritten) {
  const fs::path dir = testing::scratch_dir();
  const TrainConfig config = testing::tiny_run(dir);
  const StopSignals stop;  // tessera train's, installed before the set-up
  raise(SIGUSR1);          // e.g. while the weights load
  try {
    Trainer trainer(config);
    FAIL() << "the set-up went on";
  } catch (const StoppedDuringSetup& e) {
    EXPECT_EQ(e.signal(), SIGUSR1);
  }
  EXPECT_TRUE(list_checkpoints(config.out_dir).empty());
  EXPECT_FALSE(fs::exists(fs::path(config.out_dir) / "metrics.jsonl"));
}

TEST(StopTiming, TheTrainingLoopKeepsARequestReceivedBeforeItStarted) {
  // Nested handlers (the loop's inside the set-up's) share one request: none is lost between them.
  const StopSignals setup;
  {
    const StopSignals loop;
    raise(SIGTERM);
    EXPECT_EQ(loop.received(), SIGTERM);
  }
  EXPECT_EQ(setup.received(), SIGTERM);
  EXPECT_EQ(StopSignals::pending(), SIGTERM);
}

// The request lands after step 2's stop check and before its save (as one landing during the save
// does): the run stops at step 2 with step 2's checkpoint, without training and saving step 3.
void expect_stop_right_after_the_save(bool async) {
  const fs::path dir = testing::scratch_dir();
  TrainConfig config = testing::tiny_run(dir);
  config.steps = 6;
  config.checkpoint_every = 2;
  config.async_checkpoint = async;
  Trainer trainer(config);
  trainer.set_fault_hook([](int64_t step, float&) {
    if (step == 2) raise(SIGTERM);
  });
  const TrainResult result = trainer.run();
  EXPECT_EQ(result.stopped_by, SIGTERM);
  EXPECT_EQ(result.last_step, 2);
  EXPECT_EQ(result.last_checkpoint, fs::path(config.out_dir) / checkpoint_dir_name(2));
  const std::vector<CheckpointFolder> saved = list_checkpoints(config.out_dir);
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved.front().path.filename(), checkpoint_dir_name(2));
  EXPECT_EQ(fs::read_symlink(fs::path(config.out_dir) / "ckpt-latest"), fs::path(checkpoint_dir_name(2)));
  EXPECT_EQ(testing::read_metrics(fs::path(config.out_dir) / "metrics.jsonl").back()["step"].get<int64_t>(), 2);
}

TEST(StopTiming, ARequestDuringASaveStopsRightAfterIt) { expect_stop_right_after_the_save(false); }

TEST(StopTiming, ARequestDuringAnAsynchronousSaveStopsRightAfterItLands) { expect_stop_right_after_the_save(true); }

}  // namespace
}  // namespace tessera
