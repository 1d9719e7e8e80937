// Bad steps: a non-finite loss or gradient norm, or a spike against the recent steps, is skipped
// without touching the weights or the AdamW moments, logged in the metrics, and the run stops only
// after --max-bad-steps of them in a row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/test_support.h"
#include "train/bad_step_guard.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

std::vector<float> copy_of(const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

TEST(BadStepGuard, NonFiniteValuesAreBadAndSpikesOnlyWhenAsked) {
  BadStepGuard plain(3, 0.0), spiky(3, 6.0);
  EXPECT_TRUE(plain.judge(std::nan(""), 1.0));
  EXPECT_TRUE(plain.judge(2.0, std::numeric_limits<double>::infinity()));
  EXPECT_EQ(*plain.judge(-std::nan(""), 1.0), "loss is nan");  // not "-nan": a NaN's sign means nothing
  EXPECT_EQ(*plain.judge(2.0, -std::numeric_limits<double>::infinity()), "gradient norm is -inf");
  for (int i = 0; i < 40; ++i) {
    plain.applied(2.0 + 0.01 * (i % 5), 1.0 + 0.01 * (i % 3));
    spiky.applied(2.0 + 0.01 * (i % 5), 1.0 + 0.01 * (i % 3));
  }
  EXPECT_FALSE(plain.judge(20.0, 1.0));  // no threshold: a large finite loss is applied
  ASSERT_TRUE(spiky.judge(20.0, 1.0));
  EXPECT_NE(spiky.judge(20.0, 1.0)->find("loss spike"), std::string::npos);
  EXPECT_NE(spiky.judge(2.0, 50.0)->find("gradient norm spike"), std::string::npos);
  EXPECT_FALSE(spiky.judge(1.0, 0.5));  // only upward outliers
  EXPECT_FALSE(spiky.skipped());
  EXPECT_FALSE(spiky.skipped());
  EXPECT_TRUE(spiky.skipped());  // the third in a row
  spiky.applied(2.0, 1.0);
  EXPECT_EQ(spiky.in_a_row(), 0);
  EXPECT_EQ(spiky.total_skipped(), 3);
}

TEST(BadStepGuard, SpikesAreJudgedOnlyOnceTheWindowHoldsEnough) {
  BadStepGuard guard(5, 3.0);
  for (size_t i = 0; i + 1 < BadStepGuard::kMinSamples; ++i) guard.applied(1.0 + 0.1 * double(i % 2), 1.0);
  EXPECT_FALSE(guard.judge(100.0, 1.0));
  guard.applied(1.0, 1.0);
  EXPECT_TRUE(guard.judge(100.0, 1.0));
}

// A NaN gradient at step 3: that update is skipped (weights and moments as after step 2), the run
// goes on, and the metrics record it.
TEST(TrainerBadSteps, NonFiniteGradientIsSkippedWithoutTouchingWeightsOrMoments) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 5;
  Trainer trainer(c);
  std::vector<float> weights_before, moments_before;
  int64_t adam_steps_before = -1;
  int64_t adam_steps_after = -1;
  std::vector<float> weights_after, moments_after;
  auto moments = [&] {
    std::vector<float> both = copy_of(trainer.optimizer().m()), second = copy_of(trainer.optimizer().v());
    both.insert(both.end(), second.begin(), second.end());
    return both;
  };
  trainer.set_fault_hook([&](int64_t step, float&) {
    if (step == 3) {
      weights_before = copy_of(trainer.model().params());
      adam_steps_before = trainer.optimizer().steps_taken();
      moments_before = moments();
      trainer.model().grads().f32()[7] = std::nanf("");
    }
    if (step == 4) {
      weights_after = copy_of(trainer.model().params());
      adam_steps_after = trainer.optimizer().steps_taken();
      moments_after = moments();
    }
  });
  trainer.run();
  EXPECT_EQ(weights_after, weights_before);
  EXPECT_EQ(adam_steps_after, adam_steps_before);  // no bias-correction step either
  EXPECT_EQ(moments_after, moments_before);
  auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_TRUE(lines[2]["skipped"].get<bool>());
  EXPECT_NE(lines[2]["skip_reason"].get<std::string>().find("gradient norm is nan"), std::string::npos);
  EXPECT_EQ(lines[4]["bad_steps"], 1);
  EXPECT_FALSE(lines[3].contains("skipped"));
}

TEST(TrainerBadSteps, StopsAfterMaxBadStepsInARow) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 10;
  c.max_bad_steps = 3;
  c.checkpoint_every = 1;
  Trainer trainer(c);
  trainer.set_fault_hook([](int64_t step, float& loss) {
    if (step >= 4) loss = std::nanf("");
  });
  try {
    trainer.run();
    FAIL() << "expected the run to stop";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("step 6: loss is nan"), std::string::npos) << message;
    EXPECT_NE(message.find("3 of --max-bad-steps 3 in a row"), std::string::npos) << message;
    EXPECT_NE(message.find("ckpt-00000005"), std::string::npos) << message;  // skipped steps leave good weights
  }
}

TEST(TrainerBadSteps, LossSpikeIsSkippedWithSpikeZscore) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 30;
  c.lr_schedule = "constant";
  c.spike_zscore = 6.0;
  Trainer trainer(c);
  trainer.set_fault_hook([](int64_t step, float& loss) {
    if (step == 25) loss *= 100.0f;
  });
  trainer.run();
  auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 30u);
  EXPECT_TRUE(lines[24].contains("skipped"));
  EXPECT_NE(lines[24]["skip_reason"].get<std::string>().find("loss spike"), std::string::npos);
  for (size_t s = 0; s < 30; ++s) {
    if (s == 24) continue;
    EXPECT_FALSE(lines[s].contains("skipped")) << "step " << s + 1;
  }
}

}  // namespace
}  // namespace tessera
