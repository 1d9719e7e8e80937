// --optimizer-moments bf16 on the CPU reference: the optimizer holds its moments in bf16 (half the
// bytes), the loss curve tracks the fp32 moments' within 1% and differs from it (the rounding is
// applied), a resumed run continues exactly (checkpoints hold the moments widened to fp32, which
// round back to the same bits, and either setting resumes the other's checkpoint; an asynchronous
// save writes the synchronous one's bytes), and a bad value is refused naming the choices.
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/run_folder.h"
#include "support/test_support.h"
#include "train/resume_testing.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {

class Bf16MomentsEveryFamily : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Bf16MomentsEveryFamily, TracksTheFp32MomentsLossCurve) {
  auto dir = testing::scratch_dir();
  TrainConfig fp32 = testing::tiny_run(dir);
  fp32.train_data = testing::write_learnable_shard(dir);
  fp32.model = GetParam();
  fp32.steps = 20;
  fp32.beta2 = 0.999f;  // Llama's: the setting where round-to-nearest moments would stall
  fp32.out_dir = (dir / "fp32").string();
  Trainer(fp32).run();
  TrainConfig bf16 = fp32;
  bf16.optimizer_moments = "bf16";
  bf16.out_dir = (dir / "bf16").string();
  Trainer trainer(bf16);
  EXPECT_EQ(trainer.optimizer().m().dtype(), DType::bf16);
  EXPECT_EQ(trainer.optimizer().v().bytes(), trainer.optimizer().state_size() * 2);
  trainer.run();
  const std::vector<double> want = testing::losses_of(fp32), got = testing::losses_of(bf16);
  ASSERT_EQ(got.size(), want.size());
  double largest = 0.0;
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_NEAR(got[s], want[s], 0.01 * want[s]) << "step " << s + 1;
    largest = std::max(largest, std::fabs(got[s] - want[s]));
  }
  EXPECT_GT(largest, 0.0) << "bf16 moments left every loss unchanged: not applied?";
  EXPECT_LT(got.back(), 0.8 * got.front()) << "the run learns";
}

INSTANTIATE_TEST_SUITE_P(OptimizerMoments, Bf16MomentsEveryFamily,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "mixtral-tiny"), testing::preset_test_name);

TEST(OptimizerMoments, ResumeContinuesExactly) {
  auto dir = testing::scratch_dir();
  TrainConfig run = testing::tiny_run(dir);
  run.optimizer_moments = "bf16";
  run.steps = 5;
  const testing::StraightAndResumed r = testing::train_straight_and_resumed(run, dir, 2);
  ASSERT_FALSE(r.checkpoint.empty());
  EXPECT_EQ(r.resumed_params, r.straight_params);
  EXPECT_EQ(testing::losses_of(r.resumed), testing::losses_of(r.straight));
}

// Checkpoints hold fp32 moments, so a run may resume with the other setting: fp32 -> bf16 rounds the
// moments to nearest once and goes on within bf16's noise of the fp32 run, and bf16 -> fp32 widens them.
TEST(OptimizerMoments, ResumeSwitchesTheSettingEitherWay) {
  auto dir = testing::scratch_dir();
  for (const auto& [before, after] : {std::pair{"fp32", "bf16"}, {"bf16", "fp32"}}) {
    SCOPED_TRACE(std::string(before) + " -> " + after);
    TrainConfig run = testing::tiny_run(dir);
    run.lr_schedule = "constant";
    run.steps = 4;
    run.optimizer_moments = before;
    run.out_dir = (dir / (std::string(before) + "-straight")).string();
    Trainer(run).run();
    TrainConfig part = run;
    part.steps = 2;
    part.out_dir = (dir / (std::string(before) + "-switched")).string();
    Trainer(part).run();
    part.steps = 4;
    part.resume = true;
    part.optimizer_moments = after;
    part.quiet = false;
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    Trainer(part).run();
    const std::string said = ::testing::internal::GetCapturedStdout() + ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(testing::contains(said, std::string("--optimizer-moments ") + after +
                                            ": the checkpoint's run kept its AdamW moments in '" + before + "'"))
        << said;
    const std::vector<double> straight = testing::losses_of(run), switched = testing::losses_of(part);
    ASSERT_EQ(switched.size(), 4u);
    for (size_t s = 0; s < 4; ++s) EXPECT_NEAR(switched[s], straight[s], 0.01 * straight[s]) << "step " << s + 1;
  }
}

// An asynchronous save copies the bf16 moments aside at the step and widens them on its thread: the
// files it writes are the synchronous save's, byte for byte.
TEST(OptimizerMoments, AsyncCheckpointsWriteTheSynchronousBytes) {
  auto dir = testing::scratch_dir();
  for (const bool async : {false, true}) {
    const std::filesystem::path run_dir = dir / (async ? "async" : "sync");
    std::filesystem::create_directories(run_dir);
    TrainConfig c = testing::tiny_run(run_dir);
    c.optimizer_moments = "bf16";
    c.steps = 3;
    c.checkpoint_every = 1;
    c.keep_checkpoints = 0;
    c.async_checkpoint = async;
    Trainer(c).run();
  }
  for (int64_t step = 1; step <= 3; ++step) {
    const std::filesystem::path name =
        std::filesystem::path(checkpoint_dir_name(step)) / "shard-00000-of-00001.safetensors";
    EXPECT_EQ(testing::read_text(dir / "async" / "run" / name), testing::read_text(dir / "sync" / "run" / name))
        << name;
  }
}

TEST(OptimizerMoments, BadValueIsRefused) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.optimizer_moments = "fp16";
  const std::string error = testing::error_of([&] { c.validate(); });
  EXPECT_TRUE(testing::contains(error, "--optimizer-moments must be fp32 or bf16")) << error;
}

}  // namespace tessera
