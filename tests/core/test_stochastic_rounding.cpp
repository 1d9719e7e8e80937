// Stochastic rounding to bf16 and the host-and-device Philox: the mean over every draw is the input
// exactly, each result is one of the input's two bf16 neighbours, bf16 values, infinities and NaN
// stay; philox4x32 is core/rng's philox and the Random123 known answer.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "core/philox.h"
#include "core/rng.h"
#include "core/stochastic_rounding.h"

namespace tessera {
namespace {

float bf16_value(uint16_t bits) { return to_float(bf16{bits}); }

TEST(StochasticRounding, MeanOverEveryDrawIsTheInputExactly) {
  for (float x : {1.0f + 0x1p-20f, -3.14159265f, 1e-3f, 7.5e-39f /* subnormal */, 123456.789f, -0x1.fffffep-2f}) {
    double sum = 0.0;  // 2^16 values of 16 significant bits: exact in a double
    for (uint32_t r = 0; r < 65536; ++r) sum += double(bf16_value(bf16_bits_stochastic(x, r)));
    EXPECT_EQ(sum / 65536.0, double(x)) << "x = " << x;
  }
}

TEST(StochasticRounding, ResultIsOneOfTheTwoNeighbours) {
  const float x = 0.3f;  // between two bf16 values
  const uint16_t below = uint16_t(std::bit_cast<uint32_t>(x) >> 16);
  int up = 0;
  for (uint32_t r = 0; r < 65536; r += 7) {
    const uint16_t bits = bf16_bits_stochastic(x, r);
    ASSERT_TRUE(bits == below || bits == below + 1) << "draw " << r;
    up += bits == below + 1;
  }
  EXPECT_GT(up, 0);
  EXPECT_LT(up, 65536 / 7);
  // Only the draw's low 16 bits count.
  EXPECT_EQ(bf16_bits_stochastic(x, 0xabcd0000u), below);
}

TEST(StochasticRounding, Bf16ValuesInfinitiesAndNanStay) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 0x1p-130f, bf16_value(0x7f7f) /* the largest bf16 */})
    for (uint32_t r : {0u, 1u, 0x8000u, 0xffffu}) EXPECT_EQ(bf16_value(bf16_bits_stochastic(x, r)), x) << x << " " << r;
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t r : {0u, 0xffffu}) {
    EXPECT_EQ(bf16_value(bf16_bits_stochastic(inf, r)), inf);
    EXPECT_EQ(bf16_value(bf16_bits_stochastic(-inf, r)), -inf);
    EXPECT_TRUE(std::isnan(bf16_value(bf16_bits_stochastic(std::numeric_limits<float>::quiet_NaN(), r))));
    // A NaN whose payload lies only in the low 16 bits stays a NaN, not an infinity.
    EXPECT_TRUE(std::isnan(bf16_value(bf16_bits_stochastic(std::bit_cast<float>(0x7f800001u), r))));
  }
}

TEST(Philox, HostAndDeviceFormIsTheRngsAndTheKnownAnswer) {
  // Random123's kat_vectors: philox4x32-10, counter 0, key 0.
  const PhiloxWords zero = philox4x32(0, 0, 0);
  EXPECT_EQ(zero.w[0], 0x6627e8d5u);
  EXPECT_EQ(zero.w[1], 0xe169c58du);
  EXPECT_EQ(zero.w[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.w[3], 0x9b00dbd8u);
  for (uint64_t index : {0ull, 1ull, 0x123456789abcull})
    for (uint64_t stream : {0ull, 7ull, ~0ull}) {
      const PhiloxWords a = philox4x32(42, stream, index);
      const std::array<uint32_t, 4> b = philox(42, stream, index);
      for (int k = 0; k < 4; ++k) EXPECT_EQ(a.w[k], b[size_t(k)]);
    }
}

}  // namespace
}  // namespace tessera
