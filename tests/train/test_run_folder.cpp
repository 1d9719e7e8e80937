// What a run folder keeps across saves and restarts: the newest --keep-checkpoints checkpoints and
// the --keep-every milestones, checksums in state.json, --resume falling back past a broken newest checkpoint (and saying so),
// metrics appended rather than truncated, and a new run refusing a folder that holds checkpoints.
#include <gtest/gtest.h>

#include "checkpoint/run_folder.h"
#include "checkpoint/train_checkpoint.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

std::vector<int64_t> steps_kept(const fs::path& run) {
  std::vector<int64_t> steps;
  for (const CheckpointFolder& c : list_checkpoints(run)) steps.push_back(c.step);
  return steps;
}

TrainConfig saving_every_step(const fs::path& dir, int64_t steps, int64_t keep) {
  fs::create_directories(dir);
  TrainConfig c = testing::tiny_run(dir);
  c.steps = steps;
  c.checkpoint_every = 1;
  c.keep_checkpoints = keep;
  return c;
}

}  // namespace

TEST(RunFolder, KeepsTheNewestCheckpoints) {
  auto dir = testing::scratch_dir();
  Trainer(saving_every_step(dir / "three", 5, 3)).run();
  EXPECT_EQ(steps_kept(dir / "three" / "run"), (std::vector<int64_t>{5, 4, 3}));
  Trainer(saving_every_step(dir / "all", 4, 0)).run();
  EXPECT_EQ(steps_kept(dir / "all" / "run"), (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(fs::read_symlink(dir / "three" / "run" / kLatestCheckpoint), "ckpt-00000005");
}

// --keep-every milestones survive the pruning that keeps the newest --keep-checkpoints.
TEST(RunFolder, KeepsMilestonesOfKeepEvery) {
  auto dir = testing::scratch_dir();
  TrainConfig c = saving_every_step(dir, 9, 2);
  c.keep_every = 4;
  Trainer(c).run();
  EXPECT_EQ(steps_kept(c.out_dir), (std::vector<int64_t>{9, 8, 4}));
}

// A flipped byte in the newest checkpoint (its CRC-32 no longer matches): --resume continues from
// the one before and names the damaged one.
TEST(RunFolder, ResumeFallsBackPastADamagedCheckpoint) {
  auto dir = testing::scratch_dir();
  TrainConfig c = saving_every_step(dir, 3, 3);
  Trainer(c).run();
  const fs::path damaged = fs::path(c.out_dir) / "ckpt-00000003" / "shard-00000-of-00001.safetensors";
  std::string bytes = testing::read_text(damaged);
  bytes[bytes.size() - 9] ^= 0x40;
  testing::write_text(damaged, bytes);
  const ResumePoint point = choose_resume_checkpoint(c.out_dir);
  ASSERT_TRUE(point.checkpoint);
  EXPECT_EQ(point.checkpoint->filename(), "ckpt-00000002");
  EXPECT_TRUE(testing::contains(point.notice, "ckpt-00000003 is incomplete or damaged")) << point.notice;
  EXPECT_TRUE(testing::contains(point.notice, "CRC-32")) << point.notice;
}

// --async-checkpoint writes the same bytes as a synchronous save, while training goes on, and
// the metrics report each save's stall.
TEST(RunFolder, AsyncCheckpointsEqualSynchronousOnes) {
  auto dir = testing::scratch_dir();
  for (const bool async : {false, true}) {
    TrainConfig c = saving_every_step(dir / (async ? "async" : "sync"), 4, 0);
    c.async_checkpoint = async;
    Trainer(c).run();
  }
  for (int64_t step = 1; step <= 4; ++step)
    for (const char* file : {"model.safetensors", "shard-00000-of-00001.safetensors"}) {
      const fs::path name = fs::path(checkpoint_dir_name(step)) / file;
      EXPECT_EQ(testing::read_text(dir / "async" / "run" / name), testing::read_text(dir / "sync" / "run" / name))
          << name;
    }
  const auto lines = testing::read_metrics(dir / "async" / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  for (size_t s = 1; s < 4; ++s) EXPECT_GE(lines[s]["checkpoint_stall_s"].get<double>(), 0.0) << "step " << s + 1;
}

TEST(RunFolder, StateRecordsSizeAndChecksumOfEveryFile) {
  auto dir = testing::scratch_dir();
  const fs::path checkpoint = Trainer(saving_every_step(dir, 1, 3)).run().last_checkpoint;
  const nlohmann::json state = nlohmann::json::parse(testing::read_text(checkpoint / "state.json"));
  for (const char* file : {"model.safetensors", "shard-00000-of-00001.safetensors"}) {
    EXPECT_EQ(state["files"][file]["bytes"].get<uint64_t>(), fs::file_size(checkpoint / file)) << file;
    EXPECT_EQ(state["files"][file]["crc32"].get<std::string>().size(), 8u) << file;
  }
}

// The newest checkpoint lost its state (a crash of an older Tessera, a careless rm): --resume
// continues from the one before, says which it skipped, and the metrics keep every line.
TEST(RunFolder, ResumeFallsBackPastAnIncompleteCheckpoint) {
  auto dir = testing::scratch_dir();
  TrainConfig c = saving_every_step(dir, 3, 3);
  Trainer(c).run();
  fs::remove(fs::path(c.out_dir) / "ckpt-00000003" / "state.json");
  c.steps = 4;
  c.resume = true;
  const ResumePoint point = choose_resume_checkpoint(c.out_dir);
  ASSERT_TRUE(point.checkpoint);
  EXPECT_EQ(point.checkpoint->filename(), "ckpt-00000002");
  EXPECT_TRUE(testing::contains(point.notice, "ckpt-00000003 is incomplete")) << point.notice;
  const TrainResult result = Trainer(c).run();
  EXPECT_EQ(result.last_step, 4);
  // 3 lines from the first run, then steps 3 and 4 again: appended, never truncated.
  const auto lines = testing::read_metrics(fs::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[3]["step"], 3);
}

TEST(RunFolder, ResumeInAnEmptyFolderStartsAfreshAndSaysSo) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.resume = true;
  const ResumePoint point = choose_resume_checkpoint(c.out_dir);
  EXPECT_FALSE(point.checkpoint);
  EXPECT_TRUE(testing::contains(point.notice, "starting at step 0")) << point.notice;
  EXPECT_EQ(Trainer(c).run().last_step, c.steps);
}

TEST(RunFolder, ResumingAFinishedRunTrainsNothing) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  const fs::path saved = Trainer(c).run().last_checkpoint;
  c.resume = true;
  const TrainResult again = Trainer(c).run();
  EXPECT_TRUE(again.already_finished);
  EXPECT_EQ(again.last_step, c.steps);
  EXPECT_EQ(fs::canonical(again.last_checkpoint), fs::canonical(saved));
  EXPECT_EQ(testing::read_metrics(fs::path(c.out_dir) / "metrics.jsonl").size(), size_t(c.steps));
}

// generate, eval and convert --to-hf read weights alone: a checkpoint without its moments' shard
// file loads, and a run folder whose ckpt-latest is damaged or gone falls back to the newest complete
// checkpoint, naming what it skipped.
TEST(RunFolder, InferenceReadsTheNewestCheckpointWithWeights) {
  auto dir = testing::scratch_dir();
  TrainConfig c = saving_every_step(dir, 3, 0);
  Trainer(c).run();
  const fs::path run = c.out_dir;
  fs::remove(run / "ckpt-00000003" / "shard-00000-of-00001.safetensors");
  CheckpointToRead found = find_checkpoint_to_read(run);
  EXPECT_EQ(found.checkpoint.filename(), "ckpt-00000003");
  EXPECT_EQ(found.notice, "");
  const ModelConfig config = read_checkpoint_model_config(found.checkpoint);
  Decoder model(config);
  EXPECT_EQ(load_checkpoint(found.checkpoint, model).step, 3);

  fs::remove(run / "ckpt-00000003" / "state.json");
  found = find_checkpoint_to_read(run);
  EXPECT_EQ(found.checkpoint.filename(), "ckpt-00000002");
  EXPECT_TRUE(testing::contains(found.notice, "skipped ckpt-latest (ckpt-00000003 is incomplete or damaged"))
      << found.notice;
  EXPECT_TRUE(testing::contains(found.notice, "reading ckpt-00000002")) << found.notice;

  fs::remove(run / kLatestCheckpoint);
  fs::remove(run / "ckpt-00000002" / "model.safetensors");  // its weights: skipped too
  found = find_checkpoint_to_read(run);
  EXPECT_EQ(found.checkpoint.filename(), "ckpt-00000001");
  EXPECT_TRUE(testing::contains(found.notice, "ckpt-00000002 is incomplete or damaged")) << found.notice;
  EXPECT_EQ(find_checkpoint_to_read(run / "ckpt-00000001").checkpoint, run / "ckpt-00000001");

  fs::remove_all(run / "ckpt-00000001");
  testing::expect_error_with([&] { find_checkpoint_to_read(run); },
                             {"--checkpoint: no checkpoint at '" + run.string() + "'", "skipped ckpt-00000003"});
}

TEST(RunFolder, ANewRunRefusesAFolderWithCheckpoints) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  Trainer(c).run();
  const std::string message = testing::error_of([&] { Trainer{c}; });
  EXPECT_TRUE(testing::contains(message, "already holds checkpoints (newest ckpt-00000003); pass --resume")) << message;
  EXPECT_EQ(steps_kept(c.out_dir), (std::vector<int64_t>{3}));
}

}  // namespace tessera
