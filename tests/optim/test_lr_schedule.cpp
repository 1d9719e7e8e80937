// Learning-rate schedules and the clipping factor.
#include <gtest/gtest.h>

#include <limits>

#include "core/error.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

namespace tessera {

TEST(LrSchedule, WarmupIsLinear) {
  LrSchedule s{LrScheduleKind::constant, 1.0f, 0.0f, 4, 100};
  EXPECT_FLOAT_EQ(s.at(1), 0.25f);
  EXPECT_FLOAT_EQ(s.at(4), 1.0f);
  EXPECT_FLOAT_EQ(s.at(50), 1.0f);
}

TEST(LrSchedule, CosineEndsAtMinLr) {
  LrSchedule s{LrScheduleKind::cosine, 1.0f, 0.1f, 10, 110};
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);
  EXPECT_NEAR(s.at(60), 0.55f, 1e-6);  // half way: (max + min) / 2
  EXPECT_NEAR(s.at(110), 0.1f, 1e-6);
  EXPECT_GT(s.at(30), s.at(31));
}

TEST(LrSchedule, WsdHoldsThenDecays) {
  LrSchedule s{LrScheduleKind::wsd, 1.0f, 0.0f, 10, 100, 0.2f};
  EXPECT_FLOAT_EQ(s.at(50), 1.0f);
  EXPECT_FLOAT_EQ(s.at(80), 1.0f);
  EXPECT_NEAR(s.at(90), 0.5f, 1e-6);
  EXPECT_NEAR(s.at(100), 0.0f, 1e-6);
}

TEST(LrSchedule, LinearDecaysToMinLrAtTheLastStep) {
  LrSchedule s{LrScheduleKind::linear, 1.0f, 0.2f, 10, 110};
  EXPECT_FLOAT_EQ(s.at(5), 0.5f);  // warmup
  EXPECT_FLOAT_EQ(s.at(10), 1.0f);
  EXPECT_NEAR(s.at(60), 0.6f, 1e-6);  // half way
  EXPECT_NEAR(s.at(110), 0.2f, 1e-6);
  EXPECT_NEAR(s.at(35) - s.at(36), 0.008f, 1e-6);  // a constant step down
}

TEST(LrSchedule, UnknownNameIsAnError) {
  EXPECT_EQ(parse_lr_schedule("wsd"), LrScheduleKind::wsd);
  EXPECT_EQ(parse_lr_schedule("linear"), LrScheduleKind::linear);
  EXPECT_THROW(parse_lr_schedule("step"), Error);
}

TEST(GradClip, ScaleOnlyAboveTheThreshold) {
  EXPECT_EQ(clip_scale(0.5f, 1.0f), 1.0f);
  EXPECT_EQ(clip_scale(5.0f, 0.0f), 1.0f);
  EXPECT_NEAR(clip_scale(4.0f, 1.0f), 0.25f, 1e-6);
  // The factors torch.nn.utils.clip_grad_norm_ computes in fp32 (clamp(max_norm / (norm + 1e-6), max=1)): a norm at
  // or just under max_norm is still scaled by max_norm / (norm + 1e-6).
  EXPECT_EQ(clip_scale(1.0f, 1.0f), 0.9999990463256836f);
  EXPECT_EQ(clip_scale(0.9999995f, 1.0f), 0.9999995231628418f);
  EXPECT_EQ(clip_scale(4.0f, 1.0f), 0.24999994039535522f);
  EXPECT_EQ(clip_scale(std::numeric_limits<float>::infinity(), 1.0f), 1.0f);
}

}  // namespace tessera
