// A run resumed with other flags than it was saved with: another --batch-size continues at the first
// unseen sequence (mixtures too), a changed schedule, weight decay or seed is named with its old and
// new value, --eval-only refuses a folder without a checkpoint, leftover temporary saves are removed,
// and --init-from refuses shape flags that disagree with the import; a warmup longer than the run is named.
#include <gtest/gtest.h>

#include <map>

#include "checkpoint/hf_model.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/train_checkpoint.h"
#include "data/token_shard.h"
#include "nn/decoder_layout.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"
#include "train/trainer_resume.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

using Sequences = std::map<int64_t, std::vector<int32_t>>;  // the run's sequence index -> its inputs (T)

// Trains `c` and records the inputs of every sequence its steps read; each is read once.
Sequences train_recording(const TrainConfig& c, std::string* notice = nullptr) {
  Sequences read;
  Trainer trainer(c);
  trainer.set_data_hook([&](int64_t sequence, int64_t count, const int32_t* inputs) {
    for (int64_t i = 0; i < count; ++i) {
      const bool added = read.emplace(sequence + i, std::vector<int32_t>(inputs + i * c.seq_len,
                                                                         inputs + (i + 1) * c.seq_len)).second;
      EXPECT_TRUE(added) << "sequence " << sequence + i << " read twice";
    }
  });
  if (notice) *notice = trainer.start_notice();
  trainer.run();
  return read;
}

TrainConfig shuffled_run(const fs::path& dir, int64_t batch_size, int64_t steps) {
  fs::create_directories(dir);
  TrainConfig c = testing::tiny_run(dir);
  c.data_order = "shuffled";
  c.batch_size = batch_size;
  c.steps = steps;
  return c;
}

// 2 steps at --batch-size 8, then 4 at 4: the sequences 0..31, each once, in the order of a run at 4
// (and of one at 8) straight through.
void expect_batch_size_change_continues(TrainConfig straight4, TrainConfig straight8, TrainConfig changed) {
  const Sequences by4 = train_recording(straight4);
  const Sequences by8 = train_recording(straight8);
  ASSERT_EQ(by4.size(), 32u);
  EXPECT_EQ(by4, by8);
  Sequences read = train_recording(changed);  // 2 steps at 8
  changed.batch_size = 4;
  changed.steps = 6;
  changed.resume = true;
  std::string notice;
  const Sequences resumed = train_recording(changed, &notice);
  EXPECT_TRUE(testing::contains(notice, "--batch-size 4 (was 8): continuing at sequence 16")) << notice;
  for (const auto& [sequence, inputs] : resumed) EXPECT_TRUE(read.emplace(sequence, inputs).second) << sequence;
  EXPECT_EQ(read, by4);
}

}  // namespace

TEST(ResumeChanges, AnotherBatchSizeReadsEachSequenceOnceInOrder) {
  auto dir = testing::scratch_dir();
  expect_batch_size_change_continues(shuffled_run(dir / "by4", 4, 8), shuffled_run(dir / "by8", 8, 4),
                                     shuffled_run(dir / "changed", 8, 2));
}

TEST(ResumeChanges, AMixtureContinuesAtTheNextSequenceToo) {
  auto dir = testing::scratch_dir();
  const std::string second = testing::write_learnable_shard(dir);
  std::vector<TrainConfig> runs;
  for (auto [name, batch, steps] : {std::tuple{"by4", 4, 8}, {"by8", 8, 4}, {"changed", 8, 2}}) {
    TrainConfig c = shuffled_run(dir / name, batch, steps);
    c.train_data = "0.6:" + c.train_data + ",0.4:" + second;
    runs.push_back(c);
  }
  expect_batch_size_change_continues(runs[0], runs[1], runs[2]);
}

// A checkpoint written before consumed_sequences was recorded continues at next_batch · B.
TEST(ResumeChanges, CheckpointsWithoutConsumedSequencesStillResume) {
  auto dir = testing::scratch_dir();
  const Sequences straight = train_recording(shuffled_run(dir / "straight", 4, 4));
  TrainConfig c = shuffled_run(dir / "old", 4, 2);
  Sequences read = train_recording(c);
  const fs::path state = fs::path(c.out_dir) / "ckpt-00000002" / "state.json";
  nlohmann::json j = nlohmann::json::parse(testing::read_text(state));
  ASSERT_EQ(j["consumed_sequences"], 8);
  j.erase("consumed_sequences");
  testing::write_text(state, j.dump());
  c.steps = 4;
  c.resume = true;
  for (const auto& [sequence, inputs] : train_recording(c)) EXPECT_TRUE(read.emplace(sequence, inputs).second);
  EXPECT_EQ(read, straight);
}

// The data position moves to another origin only for a single source whose epoch length changes.
TEST(ResumeChanges, DataPositionOfAnOldCheckpointFollowsItsBatchSize) {
  TrainConfig c;
  c.batch_size = 4;
  c.train_data = "data/train_*.bin";
  CheckpointState state;
  state.next_batch = 3;
  state.run_config = {{"batch-size", 8}, {"train-data", c.train_data}};
  const DataResume r = resume_data_position(c, state, [](int64_t b) { return 96 / b * b; });
  EXPECT_EQ(r.consumed, 24);
  EXPECT_EQ(r.origin, (SequenceOrigin{0, 0}));
  EXPECT_EQ(r.notice, "--batch-size 4 (was 8): continuing at sequence 24");
  c.batch_size = 8;
  EXPECT_EQ(resume_data_position(c, state, [](int64_t) -> int64_t { return 0; }).notice, "");
}

TEST(ResumeChanges, EvalOnlyRefusesAFolderWithoutACheckpoint) {
  auto dir = testing::scratch_dir();
  for (const bool resume : {false, true}) {
    TrainConfig c = testing::tiny_run(dir);
    c.val_data = c.train_data;
    c.eval_only = true;
    c.resume = resume;
    c.out_dir = (dir / (resume ? "resumed" : "fresh")).string();
    testing::expect_error_with([&] { Trainer{c}; },
                               {"--eval-only: '" + c.out_dir + "' holds no checkpoint", "--out-dir"});
  }
}

TEST(ResumeChanges, ChangedScheduleWeightDecayAndSeedAreNamed) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 2;
  Trainer(c).run();
  c.resume = true;
  c.steps = 4;
  std::string same = Trainer(c).start_notice();
  EXPECT_TRUE(testing::contains(same, "--steps 4 (was 2): the cosine schedule is recomputed to end at step 4; step "
                                      "3's learning rate is ")) << same;
  EXPECT_FALSE(testing::contains(same, "--lr ")) << same;
  c.steps = 2;  // as saved: nothing to say
  EXPECT_EQ(Trainer(c).start_notice(), "");
  c.steps = 4;
  c.lr = 0.02f;
  c.min_lr = 0.0f;
  c.warmup = 2;
  c.lr_schedule = "linear";
  c.weight_decay = 0.0f;
  c.seed = 7;
  const std::string notice = Trainer(c).start_notice();
  for (const std::string part : {"--steps 4 (was 2)", "--lr 0.02 (was 0.01)", "--min-lr 0 (was 0.001)",
                                 "--warmup 2 (was 1)", "--lr-schedule linear (was cosine)",
                                 "--weight-decay 0 (was 0.1): AdamW decays the weights at the new rate from step 3",
                                 "--seed 7 (was 1337): the data order from step 3 on is drawn from the new seed",
                                 "(the checkpoint's schedule: "})
    EXPECT_TRUE(testing::contains(notice, part)) << part << " not in:\n" << notice;
}

// Not a resume's, but a start notice all the same: a warmup the run never finishes.
TEST(ResumeChanges, AWarmupLongerThanTheRunIsNamed) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 4;
  c.warmup = 4;  // reaches --lr at the last step: nothing to say
  EXPECT_EQ(Trainer(c).start_notice(), "");
  c.warmup = 8;
  EXPECT_EQ(Trainer(c).start_notice(),
            "--warmup 8 is longer than the run's 4 steps: the learning rate ends at 0.005, short of --lr 0.01");
}

// And flags that ZeRO-2 and 3 leave inert (each block's gradients are reduced as the backward leaves
// it) are named, rather than taken silently.
TEST(ResumeChanges, BucketFlagsInertUnderZero2And3AreNamed) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.zero = 2;
  EXPECT_EQ(Trainer(c).start_notice(), "");
  c.bucket_mb = 1;
  EXPECT_EQ(Trainer(c).start_notice(), "--bucket-mb has no effect with --zero 2: its gradients are reduced a block "
                                       "at a time, each as the backward leaves it");
  c.overlap = false;
  EXPECT_TRUE(testing::contains(Trainer(c).start_notice(), "--bucket-mb and --no-overlap have no effect with --zero 2"));
  c.zero = 1;  // ZeRO-1 reduces in buckets of --bucket-mb
  EXPECT_EQ(Trainer(c).start_notice(), "");
}

TEST(ResumeChanges, UnfinishedSavesAreRemovedAndCounted) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 2;
  Trainer(c).run();
  const fs::path run = c.out_dir;
  for (const char* name : {".ckpt-00000003.tmp", ".ckpt-00000012.tmp"}) {
    fs::create_directories(run / name / "sub");
    testing::write_text(run / name / "model.safetensors", std::string(1000, 'x'));
    testing::write_text(run / name / "sub" / "part", std::string(24, 'y'));
  }
  // Not an unfinished save: other names, and a link named like one.
  for (const char* name : {".ckpt-latest.tmp", ".ckpt-3.tmp", "ckpt-00000003.tmp", ".ckpt-00000004.old"})
    fs::create_directories(run / name);
  fs::create_directory_symlink("ckpt-00000002", run / ".ckpt-00000005.tmp");
  testing::write_text(run / ".ckpt-00000006.tmp", "a file, not a folder");
  const RemovedSaves removed = remove_unfinished_saves(run);
  EXPECT_EQ(removed.folders, 2);
  EXPECT_EQ(removed.bytes, 2u * 1024u);
  EXPECT_FALSE(fs::exists(run / ".ckpt-00000003.tmp"));
  EXPECT_FALSE(fs::exists(run / ".ckpt-00000012.tmp"));
  for (const char* name : {".ckpt-latest.tmp", ".ckpt-3.tmp", "ckpt-00000003.tmp", ".ckpt-00000004.old",
                           ".ckpt-00000006.tmp", "ckpt-00000002/state.json"})
    EXPECT_TRUE(fs::exists(run / name)) << name;
  EXPECT_TRUE(fs::is_symlink(run / ".ckpt-00000005.tmp"));

  // A resumed run removes them before its first step.
  fs::create_directories(run / ".ckpt-00000003.tmp");
  c.resume = true;
  c.steps = 3;
  Trainer(c).run();
  EXPECT_FALSE(fs::exists(run / ".ckpt-00000003.tmp"));
}

TEST(ResumeChanges, InitFromRefusesShapeFlagsThatDisagree) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 1;
  const fs::path checkpoint = Trainer(c).run().last_checkpoint;
  const ModelConfig config = read_checkpoint_model_config(checkpoint);
  save_hf_model(dir / "hf", config, open_checkpoint_model(checkpoint, config, decoder_layout(config)).weights);

  TrainConfig imported = testing::tiny_run(dir);
  imported.steps = 1;
  imported.init_from = (dir / "hf").string();
  imported.model.clear();  // not given (tessera train clears it when --model is absent)
  imported.out_dir = (dir / "plain").string();
  EXPECT_EQ(Trainer(imported).run().last_step, 1);
  imported.model = "gpt2-tiny";  // the import's shape
  imported.out_dir = (dir / "named").string();
  EXPECT_EQ(Trainer(imported).run().last_step, 1);

  imported.out_dir = (dir / "refused").string();
  imported.layers = 3;
  testing::expect_error_with([&] { Trainer{imported}; },
                             {"--init-from: the shape flags disagree with " + imported.init_from,
                              "--layers gives layers 3, the import has 2"});
  imported.layers = 0;
  imported.model = "gpt2-mini";
  testing::expect_error_with([&] { Trainer{imported}; }, {"--model gpt2-mini gives layers 4, the import has 2"});
  imported.model = "llama-tiny";
  testing::expect_error_with([&] { Trainer{imported}; },
                             {"--init-from: --model llama-tiny is a llama model but the import holds a gpt2 model"});
  EXPECT_FALSE(holds_checkpoints(imported.out_dir));
}

}  // namespace tessera
