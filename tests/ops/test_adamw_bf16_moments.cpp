// AdamW with bf16 moments: the parameter moves as with fp32 moments, each moment lands on one of
// its fp32 value's bf16 neighbours, drawn by the element's rounding key (the same key gives the same
// bits, a strided key addresses a column slice); a second moment with beta2 = 0.999 tracks its fp32
// twin where round-to-nearest stalls; coalescing keeps keys apart; bad moments are refused.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "ops/adamw.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

AdamWSegment keyed(int64_t param_offset, int64_t state_offset, int64_t length, bool decayed, int64_t key_offset) {
  AdamWSegment s{param_offset, state_offset, length, decayed};
  s.key_offset = key_offset;
  return s;
}

Tensor bf16_of(const Tensor& f32) {
  Tensor t = Tensor::zeros(f32.shape(), DType::bf16);
  for (int64_t i = 0; i < f32.numel(); ++i) t.data<bf16>()[i] = to_bf16(f32.f32()[i]);
  return t;
}

float value_at(const Tensor& bf16_tensor, int64_t i) { return to_float(bf16_tensor.data<bf16>()[i]); }

// The bf16 values just below and above x (equal when x is one).
std::pair<float, float> neighbours(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const float low = std::bit_cast<float>(u & 0xffff0000u);
  return {low, (u & 0xffffu) == 0 ? low : std::bit_cast<float>((u & 0xffff0000u) + 0x10000u)};
}

TEST(AdamWBf16Moments, ParametersMoveAsWithFp32MomentsAndMomentsRoundToANeighbour) {
  const int64_t n = 3000;
  const std::vector<AdamWSegment> segments = {keyed(0, 0, 1000, true, 5000), keyed(1000, 1000, 2000, false, 0)};
  Tensor param = testing::random_tensor({n}, 1), grad = testing::random_tensor({n}, 2, -2.0f, 2.0f);
  // Start from moments that bf16 holds exactly, so both forms see the same inputs.
  Tensor m32 = testing::random_tensor({n}, 3, -0.1f, 0.1f), v32 = testing::random_tensor({n}, 4, 0.0f, 0.1f);
  Tensor m16 = bf16_of(m32), v16 = bf16_of(v32);
  for (int64_t i = 0; i < n; ++i) m32.f32()[i] = value_at(m16, i), v32.f32()[i] = value_at(v16, i);
  Tensor param32 = testing::random_tensor({n}, 1);
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  hp.step = 4;
  hp.round_seed = 99;
  adamw_update_segments(param, grad, m16, v16, segments, hp);
  adamw_update_segments(param32, grad, m32, v32, segments, hp);
  int rounded_up = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(param.f32()[i], param32.f32()[i]) << "param " << i << ": the update uses the unrounded moments";
    for (auto [wide, narrow] : {std::pair{m32.f32()[i], value_at(m16, i)}, {v32.f32()[i], value_at(v16, i)}}) {
      const auto [low, high] = neighbours(wide);
      ASSERT_TRUE(narrow == low || narrow == high) << "element " << i << ": " << wide << " -> " << narrow;
      rounded_up += narrow != low;
    }
  }
  EXPECT_GT(rounded_up, n / 4);  // about half of the 2n moments
  EXPECT_LT(rounded_up, 2 * n - n / 4);
}

TEST(AdamWBf16Moments, TheKeyNotThePlaceDrawsTheBits) {
  // The same element (key) held at other offsets, alone or inside a longer segment, rounds alike;
  // another step draws other bits.
  const int64_t n = 512;
  Tensor grad = testing::random_tensor({n}, 5, -1.0f, 1.0f);
  auto run = [&](const std::vector<AdamWSegment>& segments, int64_t step) {
    Tensor param = Tensor::zeros({2 * n}), m = Tensor::zeros({n}, DType::bf16), v = Tensor::zeros({n}, DType::bf16);
    AdamWParams hp;
    hp.step = step;
    hp.round_seed = 7;
    adamw_update_segments(param, grad, m, v, segments, hp);
    return m;
  };
  const Tensor whole = run({keyed(0, 0, n, false, 1000)}, 1);
  const Tensor split = run({keyed(n + 100, 0, 200, false, 1000), keyed(3, 200, n - 200, false, 1200)}, 1);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(value_at(whole, i), value_at(split, i)) << i;
  // Rows of 4 of a 10-wide matrix, columns 3..6, starting one column in: element i sits at
  // key 300 + (1 + i) / 4 * 10 + (1 + i) % 4, which a contiguous segment keyed there must match.
  AdamWSegment strided = keyed(0, 0, 7, false, 300);
  strided.key_col = 1, strided.key_cols = 4, strided.key_stride = 10;
  EXPECT_EQ(adamw_rounding_key(strided, 0), 301u);
  EXPECT_EQ(adamw_rounding_key(strided, 2), 303u);
  EXPECT_EQ(adamw_rounding_key(strided, 3), 310u);
  EXPECT_EQ(adamw_rounding_key(strided, 6), 313u);
  const Tensor later = run({keyed(0, 0, n, false, 1000)}, 2);
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += value_at(whole, i) != value_at(later, i);
  EXPECT_GT(differ, n / 8) << "step 2 must draw new bits";
}

// The same keys given by stride (rows of 16, 16 apart) take the CPU's scalar loop instead of the
// vectorised one: the same bits for the parameters and both moments, from non-zero moments (every
// multiply-add of the update in play).
TEST(AdamWBf16Moments, StridedAndContiguousKeysGiveTheSameBits) {
  const int64_t n = 4096;
  const Tensor grad = testing::random_tensor({n}, 11, -1.0f, 1.0f);
  auto run = [&](const AdamWSegment& segment) {
    Tensor param = testing::random_tensor({n}, 12), m = bf16_of(testing::random_tensor({n}, 13, -0.1f, 0.1f));
    Tensor v = bf16_of(testing::random_tensor({n}, 14, 0.0f, 0.1f));
    AdamWParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.1f;
    hp.step = 5;
    hp.round_seed = 3;
    adamw_update_segments(param, grad, m, v, {segment}, hp);
    return std::tuple{param, m, v};
  };
  AdamWSegment rows = keyed(0, 0, n, true, 77);
  rows.key_cols = 16, rows.key_stride = 16;
  const auto [p1, m1, v1] = run(keyed(0, 0, n, true, 77));
  const auto [p2, m2, v2] = run(rows);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(p1.f32()[i], p2.f32()[i]) << "param " << i;
    ASSERT_EQ(value_at(m1, i), value_at(m2, i)) << "m " << i;
    ASSERT_EQ(value_at(v1, i), value_at(v2, i)) << "v " << i;
  }
}

TEST(AdamWBf16Moments, SecondMomentTracksItsFp32TwinWhereRoundToNearestStalls) {
  // v_t = 0.999 v + 0.001 g^2 rises toward g^2. In bf16 with round-to-nearest an increment below half
  // a unit in the last place (2^-9 of v) is lost, so v stalls near g^2 / 3; rounded stochastically
  // its mean follows the fp32 recurrence.
  const int64_t n = 4096, steps = 3000;
  const float g = 1e-2f;
  Tensor param = Tensor::zeros({n}), grad = Tensor::zeros({n}), m = Tensor::zeros({n}, DType::bf16),
         v = Tensor::zeros({n}, DType::bf16);
  for (int64_t i = 0; i < n; ++i) grad.f32()[i] = g;
  AdamWParams hp;
  hp.lr = 0.0f;
  hp.beta2 = 0.999f;
  double v_fp32 = 0.0;
  float v_nearest = 0.0f;
  for (int64_t step = 1; step <= steps; ++step) {
    hp.step = step;
    adamw_update_segments(param, grad, m, v, {keyed(0, 0, n, false, 0)}, hp);
    v_fp32 = 0.999 * v_fp32 + 0.001 * double(g) * g;
    v_nearest = to_float(to_bf16(0.999f * v_nearest + 0.001f * g * g));
  }
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += value_at(v, i);
  mean /= double(n);
  EXPECT_NEAR(mean / v_fp32, 1.0, 0.01) << "stochastic rounding's mean v " << mean << ", fp32 " << v_fp32;
  EXPECT_LT(v_nearest / v_fp32, 0.5) << "round-to-nearest should stall (else this test shows nothing)";
}

TEST(AdamWBf16Moments, CoalescingJoinsOnlyContiguousKeys) {
  AdamWSegment strided = keyed(20, 20, 4, false, 100);
  strided.key_cols = 2, strided.key_stride = 8;
  const std::vector<AdamWSegment> segments = {keyed(0, 0, 10, false, 50), keyed(10, 10, 5, false, 60),
                                              keyed(15, 15, 5, false, 70), strided,
                                              AdamWSegment{24, 24, 3, false}};
  const std::vector<AdamWSegment> runs = coalesce_segments(segments);
  ASSERT_EQ(runs.size(), 4u);  // the first two join; a key gap, a strided key and an unkeyed segment stay apart
  EXPECT_EQ(runs[0].length, 15);
  EXPECT_EQ(runs[0].key_offset, 50);
  EXPECT_EQ(runs[1].key_offset, 70);
  EXPECT_EQ(runs[2].key_cols, 2);
  EXPECT_FALSE(runs[3].keyed());
}

TEST(AdamWBf16Moments, UnkeyedSegmentsAndMixedMomentsAreRefused) {
  Tensor param = Tensor::zeros({8}), grad = Tensor::zeros({8});
  Tensor m = Tensor::zeros({8}, DType::bf16), v = Tensor::zeros({8}, DType::bf16), v32 = Tensor::zeros({8});
  std::string message = testing::error_of(
      [&] { adamw_update_segments(param, grad, m, v, {AdamWSegment{0, 0, 8, false}}, AdamWParams{}); });
  EXPECT_TRUE(testing::contains(message, "has no valid rounding key")) << message;
  message = testing::error_of(
      [&] { adamw_update_segments(param, grad, m, v32, {keyed(0, 0, 8, false, 0)}, AdamWParams{}); });
  EXPECT_TRUE(testing::contains(message, "both f32 or both bf16")) << message;
  Tensor m16 = Tensor::zeros({8}, DType::f16), v16 = Tensor::zeros({8}, DType::f16);
  message = testing::error_of(
      [&] { adamw_update_segments(param, grad, m16, v16, {keyed(0, 0, 8, false, 0)}, AdamWParams{}); });
  EXPECT_TRUE(testing::contains(message, "both f32 or both bf16")) << message;
}

}  // namespace
}  // namespace tessera
