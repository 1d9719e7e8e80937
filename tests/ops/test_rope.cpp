// RoPE: forward against a double reference, backward as the exact transpose (inner products, finite
// differences, inverse), v untouched, the relative-position property, llama3 inverse frequencies in
// their three regimes, the GQA layout, bad inputs, 1-thread vs 3-thread bitwise identity.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>
#include <vector>

#include "ops/op_testing.h"
#include "ops/rope.h"

namespace tessera {
namespace {

using testing::random_tensor;

struct RopeShape {
  int64_t B, T, NH, NKV, HS;
  int64_t row() const { return (NH + 2 * NKV) * HS; }
  Shape qkv() const { return {B, T, row()}; }
};

RopeConfig llama3_config() { return {.theta = 500000, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4}; }

Tensor positions_of(const std::vector<int32_t>& values) {
  Tensor t = Tensor::zeros({int64_t(values.size())}, DType::i32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// qkv with its q and k heads rotated, straight from the formula in double; v copied.
std::vector<double> reference_rope(const Tensor& qkv, const RopeShape& s, const std::vector<int32_t>& positions,
                                   const Tensor& inv_freq) {
  const int64_t half = s.HS / 2;
  std::vector<double> out(qkv.f32(), qkv.f32() + qkv.numel());
  for (int64_t b = 0; b < s.B; b++)
    for (int64_t t = 0; t < s.T; t++)
      for (int64_t h = 0; h < s.NH + s.NKV; h++) {
        const int64_t base = (b * s.T + t) * s.row() + h * s.HS;
        for (int64_t i = 0; i < half; i++) {
          const double angle = double(positions[size_t(t)]) * double(inv_freq.f32()[i]);
          const double x0 = qkv.f32()[base + i], x1 = qkv.f32()[base + i + half];
          out[size_t(base + i)] = x0 * std::cos(angle) - x1 * std::sin(angle);
          out[size_t(base + i + half)] = x1 * std::cos(angle) + x0 * std::sin(angle);
        }
      }
  return out;
}

Tensor rotated(const Tensor& x, const Tensor& positions, const RopeShape& s, const Tensor& inv_freq) {
  Tensor y = testing::copy_of(x);
  rope_forward(y, positions, s.NH, s.NKV, inv_freq);
  return y;
}

Tensor rotated_back(const Tensor& dy, const Tensor& positions, const RopeShape& s, const Tensor& inv_freq) {
  Tensor dx = testing::copy_of(dy);
  rope_backward(dx, positions, s.NH, s.NKV, inv_freq);
  return dx;
}

TEST(Rope, ForwardMatchesDoubleReference) {
  struct Case {
    RopeShape s;
    std::vector<int32_t> positions;
    RopeConfig config;
  };
  const std::vector<Case> cases = {
      {{2, 5, 4, 2, 8}, {0, 1, 7, 100, 4095}, {}},                    // GQA, Llama 2 theta
      {{1, 3, 3, 3, 16}, {5, 8191, 131071}, llama3_config()},          // MHA, far positions
      {{2, 4, 8, 1, 128}, {0, 20000, 3, 9}, llama3_config()},          // Llama 3.1 head size
      {{1, 6, 2, 1, 2}, {6, 5, 4, 3, 2, 1}, {.theta = 10000}},         // HS = 2, positions out of order
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.s.B << " T=" << c.s.T << " NH=" << c.s.NH << " NKV=" << c.s.NKV
                                      << " HS=" << c.s.HS);
    const Tensor inv_freq = rope_inv_freq(c.s.HS, c.config), positions = positions_of(c.positions);
    Tensor qkv = random_tensor(c.s.qkv(), 11, -2.0f, 2.0f);
    const std::vector<double> expected = reference_rope(qkv, c.s, c.positions, inv_freq);
    rope_forward(qkv, positions, c.s.NH, c.s.NKV, inv_freq);
    testing::expect_close(qkv, expected, 2e-6, 1e-6, "qkv");
  }
}

TEST(Rope, BackwardIsTheTransposeOfForward) {
  const RopeShape s{2, 6, 4, 2, 16};
  const Tensor inv_freq = rope_inv_freq(s.HS, llama3_config());
  const Tensor positions = positions_of({0, 3, 17, 1000, 65535, 9});
  const Tensor x = random_tensor(s.qkv(), 21), y = random_tensor(s.qkv(), 22);
  // <R x, y> == <x, R^T y>, in double, relative to |x| |y|.
  const double lhs = testing::dot(rotated(x, positions, s, inv_freq), y);
  const double rhs = testing::dot(x, rotated_back(y, positions, s, inv_freq));
  const double scale = std::sqrt(testing::dot(x, x) * testing::dot(y, y));
  EXPECT_NEAR(lhs, rhs, 1e-5 * scale);
  // R is orthogonal: R^T R x == x.
  const Tensor round_trip = rotated_back(rotated(x, positions, s, inv_freq), positions, s, inv_freq);
  testing::expect_close(round_trip, std::vector<double>(x.f32(), x.f32() + x.numel()), 1e-6, 1e-6, "R^T R x");
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const RopeShape s{1, 3, 2, 1, 4};
  const Tensor inv_freq = rope_inv_freq(s.HS, {}), positions = positions_of({2, 9, 30});
  Tensor x = random_tensor(s.qkv(), 31);
  const Tensor dout = random_tensor(s.qkv(), 32);
  auto loss = [&] { return testing::dot(rotated(x, positions, s, inv_freq), dout); };
  const std::vector<double> dx_fd = testing::numeric_gradient(x, loss, 1e-2f);
  const Tensor dx = rotated_back(dout, positions, s, inv_freq);
  testing::expect_close(dx, dx_fd, 1e-4, 1e-3, "dqkv");
}

TEST(Rope, LeavesVUntouchedBitwise) {
  const RopeShape s{2, 5, 4, 2, 8};
  const Tensor inv_freq = rope_inv_freq(s.HS, {}), positions = positions_of({1, 2, 3, 400, 5});
  const Tensor x = random_tensor(s.qkv(), 41);
  for (const Tensor& y : {rotated(x, positions, s, inv_freq), rotated_back(x, positions, s, inv_freq)})
    for (int64_t token = 0; token < s.B * s.T; token++)
      for (int64_t c = (s.NH + s.NKV) * s.HS; c < s.row(); c++) {
        const int64_t at = token * s.row() + c;
        ASSERT_EQ(std::bit_cast<uint32_t>(y.f32()[at]), std::bit_cast<uint32_t>(x.f32()[at])) << at;
      }
}

// q_m . k_n after RoPE depends only on m - n: every token carries the same q and k, at positions in
// two far-apart runs, and the scores of equal offsets agree across the runs.
TEST(Rope, ScoresDependOnlyOnRelativePosition) {
  const RopeShape s{1, 16, 2, 1, 32};  // q heads 0 and 1 share k head 0
  std::vector<int32_t> pos;
  for (int32_t p = 0; p < 8; p++) pos.push_back(p);
  for (int32_t p = 0; p < 8; p++) pos.push_back(100000 + p);
  for (const RopeConfig& config : {RopeConfig{}, llama3_config()}) {
    const Tensor inv_freq = rope_inv_freq(s.HS, config);
    Tensor qkv = Tensor::zeros(s.qkv());
    const Tensor token = random_tensor({s.row()}, 51);
    for (int64_t t = 0; t < s.T; t++) std::copy(token.f32(), token.f32() + s.row(), qkv.f32() + t * s.row());
    rope_forward(qkv, positions_of(pos), s.NH, s.NKV, inv_freq);
    auto score = [&](int64_t q_token, int64_t q_head, int64_t k_token) {
      const float* q = qkv.f32() + q_token * s.row() + q_head * s.HS;
      const float* k = qkv.f32() + k_token * s.row() + s.NH * s.HS;
      double dot = 0.0;
      for (int64_t d = 0; d < s.HS; d++) dot += double(q[d]) * k[d];
      return dot;
    };
    for (int64_t h = 0; h < s.NH; h++)
      for (int64_t m = 0; m < 8; m++)
        for (int64_t n = 0; n < 8; n++) {
          const double near_zero = score(m, h, n), far = score(8 + m, h, 8 + n);
          EXPECT_NEAR(far, near_zero, 2e-5) << "h=" << h << " m=" << m << " n=" << n;
          // The same offset elsewhere in the first run: (m, n) -> (m', n') with m' - n' = m - n.
          const int64_t shift = std::min(7 - m, 7 - n);
          EXPECT_NEAR(score(m + shift, h, n + shift), near_zero, 2e-5) << "h=" << h << " m=" << m << " n=" << n;
        }
    EXPECT_GT(std::fabs(score(1, 0, 0) - score(5, 0, 0)), 1e-3) << "scores must vary with the offset";
  }
}

TEST(Rope, InvFreqWithoutScaling) {
  const Tensor inv_freq = rope_inv_freq(8, {.theta = 10000});
  const std::vector<double> expected = {1.0, 0.1, 0.01, 0.001};
  testing::expect_close(inv_freq, expected, 0.0, 1e-7, "inv_freq");
}

// LongRoPE (Phi-3): each frequency of the unscaled theta^(-2i/R) divided by its short factor for a
// sequence within original_max_positions, by its long factor past it (the choice transformers makes
// from the largest position); the rotated channels scaled by sqrt(1 + ln(factor) / ln(original)), or by
// the attention_factor given.
TEST(Rope, LongRopeDividesEachFrequencyByItsShortOrLongFactor) {
  RopeConfig config{.theta = 10000, .factor = 4, .original_max_positions = 4096};
  config.longrope = true;
  config.short_factor = {1.0f, 1.5f, 2.0f, 3.0f};
  config.long_factor = {1.0f, 4.0f, 16.0f, 64.0f};
  const std::vector<double> plain = {1.0, 0.1, 0.01, 0.001};
  for (const int64_t positions : {int64_t(1), int64_t(4096), int64_t(4097), int64_t(16384)}) {
    const Tensor inv_freq = rope_inv_freq(8, config, positions);
    const std::vector<float>& factors = positions > 4096 ? config.long_factor : config.short_factor;
    for (int64_t i = 0; i < 4; i++)
      EXPECT_EQ(inv_freq.f32()[i], float(plain[size_t(i)] / factors[size_t(i)])) << positions << " positions, i=" << i;
  }
  EXPECT_FLOAT_EQ(rope_rotated_scale(config), float(std::sqrt(1.0 + std::log(4.0) / std::log(4096.0))));
  config.attention_factor = 1.25f;
  EXPECT_EQ(rope_rotated_scale(config), 1.25f);
  config.attention_factor = 0, config.factor = 1;
  EXPECT_EQ(rope_rotated_scale(config), 1.0f);
  config.short_factor.pop_back();
  testing::expect_error_with([&] { rope_inv_freq(8, config, 16); }, {"longrope's short_factor has 3 values", "need 4"});
}

// HS = 128, theta 500000, factor 8, low 1, high 4, original 8192: wavelengths below 8192/4 are kept,
// above 8192/1 divided by 8, between them smoothed. Expected values from the formula in double.
TEST(Rope, Llama3InvFreqMatchesFormulaInAllThreeRegimes) {
  const int64_t HS = 128;
  const RopeConfig config = llama3_config();
  const Tensor scaled = rope_inv_freq(HS, config), plain = rope_inv_freq(HS, {.theta = 500000});
  ASSERT_EQ(scaled.shape(), Shape{HS / 2});
  int kept = 0, divided = 0, smoothed = 0;
  for (int64_t i = 0; i < HS / 2; i++) {
    const double f = std::pow(500000.0, -2.0 * double(i) / double(HS));
    const double wavelen = 2.0 * std::numbers::pi / f;
    double expected;
    if (wavelen < 8192.0 / 4.0) {
      expected = f;
      kept++;
      EXPECT_EQ(scaled.f32()[i], plain.f32()[i]) << "kept i=" << i;
    } else if (wavelen > 8192.0 / 1.0) {
      expected = f / 8.0;
      divided++;
      EXPECT_EQ(scaled.f32()[i], plain.f32()[i] / 8.0f) << "divided i=" << i;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      expected = (1.0 - smooth) * f / 8.0 + smooth * f;
      smoothed++;
      EXPECT_LT(scaled.f32()[i], plain.f32()[i]) << "smoothed i=" << i;
      EXPECT_GT(scaled.f32()[i], plain.f32()[i] / 8.0f) << "smoothed i=" << i;
    }
    EXPECT_NEAR(scaled.f32()[i], expected, 1e-6 * expected) << "i=" << i;
  }
  // Wavelengths 2 pi 500000^(i/64): i <= 28 kept, 29..34 smoothed, 35.. divided.
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(smoothed, 6);
  EXPECT_EQ(divided, 29);
}

// NH = 4 q heads and NKV = 2 k heads rotate, each exactly as a lone head would; the 2 v heads and
// every head of the token at position 0 (a rotation by 0) stay bitwise as they were.
TEST(Rope, GqaLayoutRotatesExactlyTheQAndKHeads) {
  const RopeShape s{2, 3, 4, 2, 8};
  const std::vector<int32_t> pos = {0, 2, 5};
  const Tensor inv_freq = rope_inv_freq(s.HS, {}), positions = positions_of(pos);
  const Tensor x = random_tensor(s.qkv(), 61);
  const Tensor y = rotated(x, positions, s, inv_freq);
  for (int64_t b = 0; b < s.B; b++)
    for (int64_t t = 0; t < s.T; t++)
      for (int64_t slot = 0; slot < s.NH + 2 * s.NKV; slot++) {
        const int64_t at = (b * s.T + t) * s.row() + slot * s.HS;
        // The same head alone, as the q of a one-head MHA tensor (1, 1, 3 HS).
        const RopeShape lone{1, 1, 1, 1, s.HS};
        Tensor alone = Tensor::zeros(lone.qkv());
        std::copy(x.f32() + at, x.f32() + at + s.HS, alone.f32());
        rope_forward(alone, positions_of({pos[size_t(t)]}), 1, 1, inv_freq);
        const bool rotates = slot < s.NH + s.NKV;
        bool changed = false;
        for (int64_t d = 0; d < s.HS; d++) {
          changed |= y.f32()[at + d] != x.f32()[at + d];
          const float want = rotates ? alone.f32()[d] : x.f32()[at + d];
          EXPECT_EQ(y.f32()[at + d], want) << "b=" << b << " t=" << t << " slot=" << slot << " d=" << d;
        }
        EXPECT_EQ(changed, rotates && pos[size_t(t)] != 0) << "b=" << b << " t=" << t << " slot=" << slot;
      }
}

// Latent attention's tail: with inv_freq of R/2 entries each q and k head's last R channels rotate as a
// head of R channels would, the first HS - R and v stay bit for bit, and backward undoes forward.
TEST(Rope, ATailOfEachHeadRotatesAsAHeadOfItsOwn) {
  const RopeShape s{2, 5, 3, 3, 10};
  const int64_t R = 4, heads = s.NH + 2 * s.NKV;
  const Tensor positions = positions_of({0, 3, 4, 9, 200}), inv_freq = rope_inv_freq(R, {.theta = 10000});
  const Tensor qkv = random_tensor(s.qkv(), 5, -2.0f, 2.0f);
  const Tensor y = rotated(qkv, positions, s, inv_freq);
  const RopeShape tails{s.B, s.T, s.NH, s.NKV, R};
  Tensor alone = Tensor::zeros(tails.qkv());
  for (int64_t row = 0; row < s.B * s.T * heads; ++row)
    for (int64_t i = 0; i < R; ++i) alone.f32()[row * R + i] = qkv.f32()[row * s.HS + s.HS - R + i];
  const Tensor alone_rotated = rotated(alone, positions, tails, inv_freq);
  for (int64_t row = 0; row < s.B * s.T * heads; ++row)
    for (int64_t i = 0; i < s.HS; ++i) {
      const float got = y.f32()[row * s.HS + i];
      if (i < s.HS - R)
        ASSERT_EQ(got, qkv.f32()[row * s.HS + i]) << "row " << row << " channel " << i;
      else
        ASSERT_EQ(got, alone_rotated.f32()[row * R + i - (s.HS - R)]) << "row " << row << " channel " << i;
    }
  const Tensor back = rotated_back(y, positions, s, inv_freq);
  for (int64_t i = 0; i < qkv.numel(); ++i) ASSERT_NEAR(back.f32()[i], qkv.f32()[i], 1e-5f) << i;
}

// Scales (YaRN's factor on the rotated channels, DeepSeek's on the queries): forward is the pure
// rotation with the rotated channels times `rotated` and the q heads times `query`; backward applies
// the same diagonal after rotating back (the transpose).
TEST(Rope, ScalesMultiplyTheRotatedChannelsAndTheQueries) {
  const RopeShape s{2, 4, 2, 1, 8};
  const int64_t R = 4, row = s.row();
  const RopeScales scales{1.25f, 0.5f};
  const Tensor positions = positions_of({0, 5, 6, 7}), inv_freq = rope_inv_freq(R, {.theta = 10000});
  const Tensor x = random_tensor(s.qkv(), 8, -2.0f, 2.0f);
  const Tensor plain = rotated(x, positions, s, inv_freq);
  Tensor scaled = testing::copy_of(x), back = testing::copy_of(x);
  rope_forward(scaled, positions, s.NH, s.NKV, inv_freq, scales);
  rope_backward(back, positions, s.NH, s.NKV, inv_freq, scales);
  const Tensor plain_back = rotated_back(x, positions, s, inv_freq);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t channel = i % row, head = channel / s.HS, in_head = channel % s.HS;
    const bool q = head < s.NH, k = !q && head < s.NH + s.NKV, tail = in_head >= s.HS - R;
    const double factor = (q ? scales.query : 1.0) * ((q || k) && tail ? scales.rotated : 1.0);
    EXPECT_NEAR(scaled.f32()[i], factor * plain.f32()[i], 1e-6) << i;
    EXPECT_NEAR(back.f32()[i], factor * plain_back.f32()[i], 1e-6) << i;
  }
}

TEST(Rope, RejectsBadInputs) {
  using testing::contains;
  using testing::error_of;
  const Tensor inv4 = rope_inv_freq(8, {}), positions = positions_of({0, 1});
  EXPECT_TRUE(contains(error_of([] { rope_inv_freq(7, {}); }), "head_size = 7"));
  EXPECT_TRUE(contains(error_of([] { rope_inv_freq(8, {.factor = 0.5f}); }), "factor"));
  EXPECT_TRUE(contains(error_of([] { rope_inv_freq(8, {.factor = 8, .low_freq_factor = 4}); }), "high_freq_factor"));

  Tensor odd = Tensor::zeros({1, 2, 4 * 3});  // NH 2 + 2 * NKV 1 = 4 heads of HS = 3
  EXPECT_TRUE(contains(error_of([&] { rope_forward(odd, positions, 2, 1, rope_inv_freq(2, {})); }), "HS = 3"));
  Tensor qkv = Tensor::zeros({1, 2, 8 * 8});  // NH 4, NKV 2, HS 8
  EXPECT_TRUE(contains(error_of([&] { rope_forward(qkv, positions, 4, 3, inv4); }), "num_kv_heads = 3"));
  EXPECT_TRUE(contains(error_of([&] { rope_forward(qkv, positions, 4, 0, inv4); }), "num_kv_heads = 0"));
  Tensor wrong_last = Tensor::zeros({1, 2, 60});
  EXPECT_TRUE(contains(error_of([&] { rope_forward(wrong_last, positions, 4, 2, inv4); }), "last dim of qkv"));
  Tensor flat = Tensor::zeros({2, 64});
  EXPECT_TRUE(contains(error_of([&] { rope_forward(flat, positions, 4, 2, inv4); }), "qkv must be"));
  EXPECT_TRUE(contains(error_of([&] { rope_forward(qkv, positions_of({0, -3}), 4, 2, inv4); }), "positions[1] = -3"));
  EXPECT_TRUE(contains(error_of([&] { rope_forward(qkv, positions_of({0, 1, 2}), 4, 2, inv4); }), "positions"));
  const Tensor float_positions = Tensor::zeros({2});
  EXPECT_TRUE(contains(error_of([&] { rope_forward(qkv, float_positions, 4, 2, inv4); }), "positions must be i32"));
  EXPECT_TRUE(contains(error_of([&] { rope_forward(qkv, positions, 4, 2, rope_inv_freq(16, {})); }), "inv_freq"));
  Tensor dqkv = Tensor::zeros({1, 2, 60});
  EXPECT_TRUE(contains(error_of([&] { rope_backward(dqkv, positions, 4, 2, inv4); }), "last dim of dqkv"));
  Tensor good_dqkv = Tensor::zeros({1, 2, 64});
  EXPECT_TRUE(contains(error_of([&] { rope_backward(good_dqkv, positions_of({-1, 0}), 4, 2, inv4); }),
                       "positions[0] = -1"));
}

TEST(Rope, OneThreadAndSeveralAgree) {
  const RopeShape s{2, 100, 4, 2, 64};  // 102400 elements: above the parallel threshold
  std::vector<int32_t> pos;
  for (int32_t t = 0; t < int32_t(s.T); t++) pos.push_back(5000 + 3 * t);
  const Tensor inv_freq = rope_inv_freq(s.HS, llama3_config()), positions = positions_of(pos);
  const Tensor x = random_tensor(s.qkv(), 71), dy = random_tensor(s.qkv(), 72);
  Tensor y[2], dx[2];
  for (int run = 0; run < 2; run++)
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      y[run] = rotated(x, positions, s, inv_freq);
      dx[run] = rotated_back(dy, positions, s, inv_freq);
    });
  testing::expect_identical(y[0], y[1], "qkv");
  testing::expect_identical(dx[0], dx[1], "dqkv");
}

}  // namespace
}  // namespace tessera
