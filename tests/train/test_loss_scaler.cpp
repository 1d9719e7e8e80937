// Dynamic loss scaling: the scaler's rules (halve and skip on overflow, double after a window of
// clean steps, refuse to fall below the minimum), and in the trainer, on the CPU in fp32, that a
// power-of-two scale is exact (the same weights as no scaling, bit for bit), that metrics report
// it, and that a checkpoint carries it into a resumed run.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <utility>

#include "checkpoint/train_checkpoint.h"
#include "support/test_support.h"
#include "train/loss_scaler.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(LossScaler, DisabledIsTheIdentity) {
  LossScaler scaler(LossScalerConfig{});
  EXPECT_FALSE(scaler.enabled());
  EXPECT_EQ(scaler.scale(), 1.0f);
  EXPECT_EQ(scaler.update(kInf), LossScaler::Verdict::step);
  EXPECT_EQ(scaler.scale(), 1.0f);
}

TEST(LossScaler, OverflowHalvesAndSkipsCleanStepsGrowIt) {
  LossScaler scaler(LossScalerConfig{true, 1024.0, 3, 1.0});
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_EQ(scaler.update(kInf), LossScaler::Verdict::skip);
  EXPECT_EQ(scaler.scale(), 512.0f);
  EXPECT_EQ(scaler.update(std::nanf("")), LossScaler::Verdict::skip);
  EXPECT_EQ(scaler.scale(), 256.0f);
  EXPECT_EQ(scaler.update(3.0f), LossScaler::Verdict::step);
  EXPECT_EQ(scaler.update(3.0f), LossScaler::Verdict::step);
  EXPECT_EQ(scaler.scale(), 256.0f);
  EXPECT_EQ(scaler.update(3.0f), LossScaler::Verdict::step);  // the third clean step in a row
  EXPECT_EQ(scaler.scale(), 512.0f);
  // An overflow restarts the window.
  EXPECT_EQ(scaler.update(3.0f), LossScaler::Verdict::step);
  EXPECT_EQ(scaler.update(kInf), LossScaler::Verdict::skip);
  EXPECT_EQ(scaler.update(3.0f), LossScaler::Verdict::step);
  EXPECT_EQ(scaler.update(3.0f), LossScaler::Verdict::step);
  EXPECT_EQ(scaler.scale(), 256.0f);
}

TEST(LossScaler, OverflowAtTheMinimumScaleEndsTheRun) {
  LossScaler scaler(LossScalerConfig{true, 2.0, 1000, 1.0});
  EXPECT_EQ(scaler.update(kInf), LossScaler::Verdict::skip);
  const std::string message = testing::error_of([&] { scaler.update(kInf); });
  EXPECT_TRUE(testing::contains(message, "overflow even at loss scale 1")) << message;
  EXPECT_TRUE(testing::contains(message, "--dtype bf16")) << message;
}

TEST(LossScaler, BadSettingsAreRefused) {
  for (double scale : {0.5, -1.0, double(kInf), 0x1p200})
    EXPECT_TRUE(testing::contains(testing::error_of([&] { LossScaler(LossScalerConfig{true, scale}); }),
                                  "--loss-scale"))
        << scale;
  EXPECT_TRUE(testing::contains(testing::error_of([&] { LossScaler(LossScalerConfig{true, 1024.0, 0}); }),
                                "--loss-scale-window"));
  // A scale that is not a power of two would not divide out exactly; the message names the nearest one.
  for (auto [scale, nearest] : {std::pair{1000.0, "use 1024"}, {3.0, "use 4"}, {65537.0, "use 65536"}}) {
    const std::string message = testing::error_of([&] { LossScaler(LossScalerConfig{true, scale}); });
    EXPECT_TRUE(testing::contains(message, "must be a power of two")) << message;
    EXPECT_TRUE(testing::contains(message, nearest)) << message;
  }
  EXPECT_EQ(LossScaler(LossScalerConfig{true, 1.0}).scale(), 1.0f);
}

// A scaler restored from another's scale and clean steps doubles when that one does: a resumed run's
// scale follows the uninterrupted run's (torch.amp.GradScaler saves its growth tracker alike).
TEST(LossScaler, RestoreContinuesTheRunOfCleanSteps) {
  const LossScalerConfig config{true, 1024.0, 3};
  LossScaler uninterrupted(config), resumed(config), window_shrunk(LossScalerConfig{true, 1024.0, 2});
  uninterrupted.update(1.0f);
  uninterrupted.update(1.0f);
  ASSERT_EQ(uninterrupted.clean_steps(), 2);
  resumed.restore(uninterrupted.scale(), uninterrupted.clean_steps());
  window_shrunk.restore(uninterrupted.scale(), uninterrupted.clean_steps());  // past its window: the next step doubles
  uninterrupted.update(1.0f);
  resumed.update(1.0f);
  window_shrunk.update(1.0f);
  EXPECT_EQ(uninterrupted.scale(), 2048.0f);
  EXPECT_EQ(resumed.scale(), 2048.0f);
  EXPECT_EQ(window_shrunk.scale(), 2048.0f);
  EXPECT_EQ(resumed.clean_steps(), 0);
}

std::vector<float> final_params(Trainer& trainer) {
  Tensor& p = trainer.model().params();
  return std::vector<float>(p.f32(), p.f32() + p.numel());
}

TEST(LossScalerInTrainer, PowerOfTwoScaleIsExactInFp32) {
  auto dir = testing::scratch_dir();
  TrainConfig off = testing::tiny_run(dir);
  off.loss_scaling = "off";
  off.out_dir = (dir / "off").string();
  TrainConfig dynamic = off;
  dynamic.loss_scaling = "dynamic";
  dynamic.loss_scale = 0x1p20;
  dynamic.out_dir = (dir / "dynamic").string();
  Trainer a(off), b(dynamic);
  a.run();
  b.run();
  EXPECT_EQ(final_params(a), final_params(b));
  const auto lines_off = testing::read_metrics(std::filesystem::path(off.out_dir) / "metrics.jsonl");
  const auto lines = testing::read_metrics(std::filesystem::path(dynamic.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), lines_off.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["loss"], lines_off[i]["loss"]) << i;
    EXPECT_EQ(lines[i]["grad_norm"], lines_off[i]["grad_norm"]) << i;  // reported unscaled
    EXPECT_EQ(lines[i]["loss_scale"].get<double>(), 0x1p20) << i;
    EXPECT_FALSE(lines_off[i].contains("loss_scale")) << i;
    EXPECT_FALSE(lines[i].contains("skipped")) << i;
  }
}

TEST(LossScalerInTrainer, CheckpointCarriesTheScale) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.loss_scaling = "dynamic";
  c.loss_scale = 4096;
  c.loss_scale_window = 2;  // 3 clean steps: the scale doubles once
  Trainer first(c);
  first.run();
  const std::filesystem::path checkpoint = *find_checkpoint(c.out_dir);
  std::ifstream state(checkpoint / "state.json");
  EXPECT_EQ(nlohmann::json::parse(state)["loss_scale"].get<double>(), 8192.0);

  EXPECT_EQ(nlohmann::json::parse(std::ifstream(checkpoint / "state.json"))["loss_scale_clean_steps"], 1);

  c.steps = 4;
  c.resume = true;
  Trainer resumed(c);
  resumed.run();
  const auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back()["step"], 4);
  // 8192 and its one clean step restored: step 4 completes the window and doubles the scale, as the
  // uninterrupted run's step 4 does.
  EXPECT_EQ(lines.back()["loss_scale"].get<double>(), 16384.0);
  c.resume = false;
  c.out_dir = (dir / "uninterrupted").string();
  Trainer(c).run();
  const auto straight = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(straight.size(), 4u);
  EXPECT_EQ(straight.back()["loss_scale"], lines.back()["loss_scale"]);
}

TEST(LossScalerInTrainer, UnknownModeIsRefused) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.loss_scaling = "static";
  const std::string message = testing::error_of([&] { Trainer trainer(c); });
  EXPECT_TRUE(testing::contains(message, "--loss-scaling must be auto, dynamic or off")) << message;
}

}  // namespace
}  // namespace tessera
