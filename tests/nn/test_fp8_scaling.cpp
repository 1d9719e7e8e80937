// fp8 delayed scaling: the scales follow the largest amax of the recent steps (power-of-two, with
// the margin), per format; old steps leave the history; quantization rounds at the scale and records
// the amax; a saved history continues, and a damaged one is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "nn/fp8_scaling.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using testing::expect_error_with;

constexpr int64_t kLayers = 2;

std::vector<float> amaxes_with(int64_t slot, float value) {
  std::vector<float> amaxes(size_t(kLayers * kFp8LinearsPerBlock * kFp8Roles), 0.0f);
  amaxes[size_t(slot)] = value;
  return amaxes;
}

const int64_t kInput = Fp8Scaling::slot(1, BlockLinear::mlp_in, Fp8Role::input);
const int64_t kGrad = Fp8Scaling::slot(1, BlockLinear::mlp_in, Fp8Role::grad);

}  // namespace

TEST(Fp8Scaling, ScalesPutTheRecentAmaxNearTheTopOfEachFormat) {
  Fp8Scaling fp8({Fp8Recipe::hybrid, 16, 0}, kLayers, Device::cpu);
  EXPECT_EQ(fp8.scale(kInput), 1.0f);  // no history yet
  std::vector<float> amaxes = amaxes_with(kInput, 3.0f);
  amaxes[size_t(kGrad)] = 3.0f;
  fp8.update(amaxes);
  // E4M3: 448 / 3 = 149.3, so 2^7; E5M2 (hybrid's gradients): 57344 / 3 = 19115, so 2^14.
  EXPECT_EQ(fp8.scale(kInput), 128.0f);
  EXPECT_EQ(fp8.scale(kGrad), 16384.0f);
  EXPECT_EQ(fp8.format(Fp8Role::grad), Fp8Format::e5m2);
  EXPECT_EQ(fp8.scale(kInput + 1), 1.0f);  // the weight slot saw nothing

  Fp8Scaling e4m3({Fp8Recipe::e4m3, 16, 2}, kLayers, Device::cpu);
  e4m3.update(amaxes);
  EXPECT_EQ(e4m3.format(Fp8Role::grad), Fp8Format::e4m3);
  EXPECT_EQ(e4m3.scale(kInput), 32.0f);  // 2^7 less a margin of 2
  EXPECT_EQ(e4m3.scale(kGrad), 32.0f);
}

TEST(Fp8Scaling, OldStepsLeaveTheHistory) {
  Fp8Scaling fp8({Fp8Recipe::hybrid, 2, 0}, kLayers, Device::cpu);
  fp8.update(amaxes_with(kInput, 100.0f));  // 448 / 100: 2^2
  EXPECT_EQ(fp8.scale(kInput), 4.0f);
  fp8.update(amaxes_with(kInput, 1.0f));
  EXPECT_EQ(fp8.scale(kInput), 4.0f);  // 100 is still among the last 2 steps
  fp8.update(amaxes_with(kInput, 1.0f));
  EXPECT_EQ(fp8.scale(kInput), 256.0f);  // 448 / 1: 2^8
  EXPECT_EQ(fp8.history().size(), size_t(2 * fp8.slots()));
}

TEST(Fp8Scaling, NonFiniteAmaxesSetNoScale) {
  Fp8Scaling fp8({Fp8Recipe::hybrid, 4, 0}, kLayers, Device::cpu);
  fp8.update(amaxes_with(kInput, 7.0f));  // 448 / 7 = 64
  fp8.update(amaxes_with(kInput, std::numeric_limits<float>::infinity()));
  fp8.update(amaxes_with(kInput, std::numeric_limits<float>::quiet_NaN()));
  EXPECT_EQ(fp8.scale(kInput), 64.0f);
}

TEST(Fp8Scaling, QuantizeRoundsAtTheScaleAndRecordsTheAmax) {
  Fp8Scaling fp8({Fp8Recipe::hybrid, 16, 0}, kLayers, Device::cpu);
  Tensor x = Tensor::zeros({4});
  const float values[] = {0.3f, -2.0f, 1000.0f, 0.001f};
  std::copy(values, values + 4, x.f32());
  const Tensor q = fp8.quantize(x, kInput);  // scale 1, E4M3
  EXPECT_EQ(q.f32()[0], 0.3125f);            // between 0.28125 and 0.3125, nearer the latter
  EXPECT_EQ(q.f32()[1], -2.0f);
  EXPECT_EQ(q.f32()[2], 448.0f);             // saturates
  EXPECT_EQ(q.f32()[3], 0.001953125f);       // the smallest subnormal, 2^-9
  EXPECT_EQ(x.f32()[0], 0.3f);               // the operand itself is untouched
  std::vector<float> amaxes = fp8.take_amaxes();
  EXPECT_EQ(amaxes[size_t(kInput)], 1000.0f);
  EXPECT_EQ(amaxes[size_t(kGrad)], 0.0f);
  EXPECT_EQ(fp8.take_amaxes()[size_t(kInput)], 0.0f);  // taken means cleared

  // After a step whose amax was 1000 the scale is 2^-2: 1000 · 1/4 = 250 rounds to 256 in E4M3.
  fp8.update(amaxes);
  EXPECT_EQ(fp8.scale(kInput), 0.25f);
  EXPECT_EQ(fp8.quantize(x, kInput).f32()[2], 1024.0f);
}

TEST(Fp8Scaling, ASavedHistoryContinues) {
  Fp8Scaling saved({Fp8Recipe::hybrid, 3, 0}, kLayers, Device::cpu);
  for (float a : {100.0f, 1.0f, 2.0f}) saved.update(amaxes_with(kInput, a));
  Fp8Scaling resumed({Fp8Recipe::hybrid, 3, 0}, kLayers, Device::cpu);
  resumed.restore_history(saved.history(), "checkpoint c");
  EXPECT_EQ(resumed.history(), saved.history());
  EXPECT_EQ(resumed.scale(kInput), saved.scale(kInput));
  // A shorter history keeps the newest steps: 1 and 2, not 100.
  Fp8Scaling shorter({Fp8Recipe::hybrid, 2, 0}, kLayers, Device::cpu);
  shorter.restore_history(saved.history(), "checkpoint c");
  EXPECT_EQ(shorter.scale(kInput), 128.0f);  // 448 / 2: 2^7
}

TEST(Fp8Scaling, ADamagedHistoryIsRefused) {
  Fp8Scaling fp8({Fp8Recipe::hybrid, 3, 0}, kLayers, Device::cpu);
  std::vector<float> ragged(size_t(fp8.slots()) + 1, 1.0f);
  expect_error_with([&] { fp8.restore_history(ragged, "checkpoint c"); },
                    {"checkpoint c: the fp8 amax history holds 37 values, not a whole number of steps of 36"});
  std::vector<float> negative = amaxes_with(kInput, -1.0f);
  expect_error_with([&] { fp8.restore_history(negative, "checkpoint c"); },
                    {"checkpoint c: the fp8 amax history holds -1, not a finite non-negative amax"});
}

TEST(Fp8Scaling, OptionsOutOfRangeAreRefused) {
  expect_error_with([] { check_fp8_options({Fp8Recipe::hybrid, 0, 0}); }, {"--fp8-amax-history must be in [1, 1024]"});
  expect_error_with([] { check_fp8_options({Fp8Recipe::hybrid, 16, 9}); }, {"--fp8-margin must be in [0, 8]"});
  expect_error_with([] { parse_fp8_recipe("e5m2"); }, {"--fp8 must be off, hybrid"});
}

}  // namespace tessera
