// The sharded checkpoint format in one process: a checkpoint of the first format (whole tensors in
// model.safetensors and optimizer.safetensors, no index) still resumes, to the same losses as the
// sharded one it was made from; a rank's share of the moments reads back exactly, from whichever
// files hold it; and --resume falls back past a checkpoint with a missing shard or a damaged index.
#include <gtest/gtest.h>

#include "checkpoint/checkpoint_state.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/train_checkpoint.h"
#include "nn/decoder_layout.h"
#include "optim/adamw_optimizer.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

TrainConfig saving_run(const fs::path& dir, int64_t steps) {
  fs::create_directories(dir);
  TrainConfig c = testing::tiny_run(dir);
  c.steps = steps;
  c.checkpoint_every = 1;
  c.lr_schedule = "constant";
  return c;
}

// Rewrites `checkpoint` into `legacy` in the first format: model.safetensors as is, every moment whole
// in optimizer.safetensors, state.json without index.
void write_first_format(const fs::path& checkpoint, const fs::path& legacy) {
  fs::create_directories(legacy);
  fs::copy_file(checkpoint / kModelFile, legacy / kModelFile);
  nlohmann::json state = read_state_json(checkpoint);
  const ParameterLayout layout = decoder_layout(state_model_config(state, checkpoint));
  const OptimizerState moments = load_optimizer_state(checkpoint, layout, full_segments(layout));
  std::vector<SafetensorsEntry> entries;
  for (const ParamSpec& spec : layout.specs())
    for (const auto& [prefix, moment] : {std::pair{"m.", &moments.m}, {"v.", &moments.v}})
      entries.push_back({prefix + spec.name, DType::f32, spec.shape, moment->data<float>() + spec.offset});
  write_safetensors(legacy / kOptimizerFile, entries);
  for (const char* key : {"tensors", "crc_block_bytes", "format", "layout", "config_hash"}) state.erase(key);
  state["files"] = files_json({{kModelFile, file_digest(legacy / kModelFile, "model")},
                               {kOptimizerFile, file_digest(legacy / kOptimizerFile, "optimizer")}});
  testing::write_text(legacy / "state.json", state.dump());
}

}  // namespace

TEST(CheckpointFormat, FirstFormatCheckpointsStillResume) {
  auto dir = testing::scratch_dir();
  TrainConfig c = saving_run(dir / "sharded", 2);
  Trainer(c).run();
  write_first_format(fs::path(c.out_dir) / "ckpt-00000002", dir / "legacy" / "run" / "ckpt-00000002");
  std::vector<std::vector<nlohmann::json>> metrics;
  for (const fs::path& run : {fs::path(c.out_dir), dir / "legacy" / "run"}) {
    TrainConfig resumed = c;
    resumed.out_dir = run.string();
    resumed.steps = 4;
    resumed.resume = true;
    EXPECT_EQ(Trainer(resumed).run().last_step, 4);
    metrics.push_back(testing::read_metrics(run / "metrics.jsonl"));
  }
  ASSERT_EQ(metrics[1].size(), 2u);  // the legacy folder's run only wrote steps 3 and 4
  for (size_t s = 0; s < 2; ++s) EXPECT_EQ(metrics[1][s]["loss"], metrics[0][s + 2]["loss"]) << "step " << s + 3;
}

// Any cut of the flat buffer into segments (here: 3 ranks' contiguous shares, state packed from 0)
// reads back the moments of the whole, element for element.
TEST(CheckpointFormat, ASliceOfTheMomentsReadsBackExactly) {
  auto dir = testing::scratch_dir();
  TrainConfig c = saving_run(dir, 1);
  Trainer trainer(c);
  const fs::path checkpoint = trainer.run().last_checkpoint;
  const ParameterLayout& layout = trainer.model().layout();
  const std::vector<float> m(trainer.optimizer().m().f32(), trainer.optimizer().m().f32() + layout.total());
  for (int rank = 0; rank < 3; ++rank) {
    const int64_t begin = layout.total() * rank / 3, end = layout.total() * (rank + 1) / 3;
    std::vector<OptimSegment> segments;
    append_segments(layout, begin, end, 0, segments);
    const OptimizerState share = load_optimizer_state(checkpoint, layout, segments);
    ASSERT_EQ(share.m.numel(), end - begin);
    EXPECT_TRUE(std::equal(m.begin() + begin, m.begin() + end, share.m.f32())) << "rank " << rank;
  }
}

TEST(CheckpointFormat, ResumeFallsBackPastAMissingShardOrADamagedIndex) {
  const std::vector<std::pair<std::string, std::function<void(const fs::path&)>>> damages = {
      {"shard-00000-of-00001.safetensors' is missing",
       [](const fs::path& ckpt) { fs::remove(ckpt / "shard-00000-of-00001.safetensors"); }},
      {"has slices for", [](const fs::path& ckpt) {
         nlohmann::json state = read_state_json(ckpt);
         state["tensors"]["v.wpe"]["slices"] = nlohmann::json::array();
         testing::write_text(ckpt / "state.json", state.dump());
       }},
      {"'tensors' must be an object", [](const fs::path& ckpt) {
         nlohmann::json state = read_state_json(ckpt);
         state["tensors"] = nlohmann::json::array();
         testing::write_text(ckpt / "state.json", state.dump());
       }},
  };
  for (const auto& [needle, damage] : damages) {
    auto dir = testing::scratch_dir() / needle.substr(0, 6);
    TrainConfig c = saving_run(dir, 3);
    Trainer(c).run();
    damage(fs::path(c.out_dir) / "ckpt-00000003");
    const ResumePoint point = choose_resume_checkpoint(c.out_dir);
    ASSERT_TRUE(point.checkpoint) << needle;
    EXPECT_EQ(point.checkpoint->filename(), "ckpt-00000002") << needle;
    EXPECT_TRUE(testing::contains(point.notice, "ckpt-00000003 is incomplete or damaged")) << point.notice;
    EXPECT_TRUE(testing::contains(point.notice, needle)) << point.notice;
  }
}

}  // namespace tessera
