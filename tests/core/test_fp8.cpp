// The fp8 formats (core/fp8.h): every code of E4M3 and E5M2 decodes to the value the format's
// definition gives, computed here in double; every non-NaN code survives decode then encode; encode
// equals a brute-force search for the nearest finite code (ties to the even code) on random floats
// over a wide range, on every midpoint between codes and the floats beside it, around the largest
// value and in the subnormal and underflow ranges; large values and infinities saturate; NaN stays NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/fp8.h"

namespace tessera {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

struct Definition {
  int exponent_bits, mantissa_bits, bias;
};

Definition definition_of(Fp8Format f) { return f == Fp8Format::e4m3 ? Definition{4, 3, 7} : Definition{5, 2, 15}; }

// The value of `code` by the format's definition: NaN for E4M3's S.1111.111 and E5M2's exponent
// 11111 with a non-zero mantissa, +-infinity for E5M2's 11111.00, subnormals at exponent 0.
double defined_value(int code, Fp8Format f) {
  const Definition d = definition_of(f);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int exponent = (code & 0x7f) >> d.mantissa_bits;
  const int mantissa = code & ((1 << d.mantissa_bits) - 1);
  const int top = (1 << d.exponent_bits) - 1;
  if (f == Fp8Format::e4m3 && exponent == top && mantissa == (1 << d.mantissa_bits) - 1)
    return std::numeric_limits<double>::quiet_NaN();
  if (f == Fp8Format::e5m2 && exponent == top)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  const double fraction = double(mantissa) / double(1 << d.mantissa_bits);
  if (exponent == 0) return sign * std::ldexp(fraction, 1 - d.bias);
  return sign * std::ldexp(1.0 + fraction, exponent - d.bias);
}

std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%x", v);
  return text;
}

// The codes of finite non-negative values, each with its value.
struct Candidate {
  int code;
  double value;
};

std::vector<Candidate> finite_non_negative(Fp8Format f) {
  std::vector<Candidate> out;
  for (int code = 0; code < 0x80; code++)
    if (std::isfinite(defined_value(code, f))) out.push_back({code, defined_value(code, f)});
  return out;
}

// |a - c| for a, c >= 0 exactly, as the pair (rounded difference, its rounding error) by Fast2Sum (the
// larger operand first); comparing pairs lexicographically compares the exact distances, where the
// rounded differences alone tie falsely (FLT_MAX's distances to 49152 and 57344 round alike).
std::pair<double, double> exact_distance(double a, double c) {
  const double big = std::max(a, c), small = std::min(a, c);
  const double d = big - small;
  return {d, (big - d) - small};
}

// The nearest finite code by exhaustive search, ties to the even code, sign applied afterwards (so
// values beyond the largest saturate to it, and negative values rounding to zero give -0).
int nearest_code(float x, const std::vector<Candidate>& candidates) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (std::isinf(a)) return sign | candidates.back().code;
  int best = candidates[0].code;
  std::pair<double, double> best_distance = exact_distance(a, candidates[0].value);
  for (const Candidate& c : candidates) {
    const std::pair<double, double> d = exact_distance(a, c.value);
    if (d < best_distance || (d == best_distance && c.code % 2 == 0)) {
      best = c.code;
      best_distance = d;
    }
  }
  return sign | best;
}

TEST(Fp8, FormatConstants) {
  EXPECT_EQ(fp8_max(Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::e5m2), 57344.0f);
  EXPECT_EQ(fp8_format_name(Fp8Format::e4m3), "e4m3");
  EXPECT_EQ(fp8_format_name(Fp8Format::e5m2), "e5m2");
}

// A few codes written out, so the definition above is itself pinned to the OCP tables.
TEST(Fp8, DefinitionMatchesKnownCodes) {
  EXPECT_EQ(defined_value(0x38, Fp8Format::e4m3), 1.0);
  EXPECT_EQ(defined_value(0x7e, Fp8Format::e4m3), 448.0);
  EXPECT_EQ(defined_value(0x08, Fp8Format::e4m3), 0x1p-6);
  EXPECT_EQ(defined_value(0x01, Fp8Format::e4m3), 0x1p-9);
  EXPECT_EQ(defined_value(0xfe, Fp8Format::e4m3), -448.0);
  EXPECT_TRUE(std::isnan(defined_value(0xff, Fp8Format::e4m3)));
  EXPECT_EQ(defined_value(0x78, Fp8Format::e4m3), 256.0);  // E4M3 has no infinity: S.1111.000 is finite
  EXPECT_EQ(defined_value(0x3c, Fp8Format::e5m2), 1.0);
  EXPECT_EQ(defined_value(0x7b, Fp8Format::e5m2), 57344.0);
  EXPECT_EQ(defined_value(0x04, Fp8Format::e5m2), 0x1p-14);
  EXPECT_EQ(defined_value(0x01, Fp8Format::e5m2), 0x1p-16);
  EXPECT_EQ(defined_value(0xfc, Fp8Format::e5m2), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(defined_value(0x7d, Fp8Format::e5m2)));
}

TEST(Fp8, EveryCodeDecodesToItsDefinedValue) {
  for (const Fp8Format f : kFormats) {
    SCOPED_TRACE(fp8_format_name(f));
    int nans = 0;
    for (int code = 0; code < 256; code++) {
      const double expected = defined_value(code, f);
      const float got = fp8_decode(uint8_t(code), f);
      if (std::isnan(expected)) {
        nans++;
        EXPECT_TRUE(std::isnan(got)) << hex(uint32_t(code));
        continue;
      }
      EXPECT_EQ(double(got), expected) << hex(uint32_t(code));
      EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << hex(uint32_t(code));  // -0 included
    }
    EXPECT_EQ(nans, f == Fp8Format::e4m3 ? 2 : 6);
  }
}

TEST(Fp8, DecodeThenEncodeReturnsEveryNonNanCode) {
  for (const Fp8Format f : kFormats) {
    SCOPED_TRACE(fp8_format_name(f));
    for (int code = 0; code < 256; code++) {
      const float value = fp8_decode(uint8_t(code), f);
      if (std::isnan(value)) continue;
      // E5M2's infinities saturate to the largest finite code of their sign.
      const int expected = std::isinf(value) ? (code & 0x80) | 0x7b : code;
      EXPECT_EQ(int(fp8_encode(value, f)), expected) << hex(uint32_t(code));
    }
  }
}

// The floats an encoder most easily gets wrong, then random ones.
std::vector<float> hard_and_random_floats(Fp8Format f, uint64_t seed) {
  std::vector<float> xs;
  const std::vector<Candidate> codes = finite_non_negative(f);
  auto with_neighbours = [&](float v) {
    xs.push_back(v);
    xs.push_back(std::nextafter(v, 0.0f));
    xs.push_back(std::nextafter(v, std::numeric_limits<float>::infinity()));
  };
  for (size_t k = 0; k < codes.size(); k++) {
    with_neighbours(float(codes[k].value));
    if (k + 1 < codes.size()) with_neighbours(float((codes[k].value + codes[k + 1].value) / 2));  // a tie, exact
  }
  const double max = fp8_max(f), top_spacing = codes.back().value - codes[codes.size() - 2].value;
  for (const double v : {max + top_spacing / 2, max + top_spacing, 2 * max, 1e10}) with_neighbours(float(v));
  with_neighbours(std::numeric_limits<float>::max());
  const double smallest = codes[1].value;  // the smallest subnormal
  for (const double v : {smallest / 2, smallest / 4, 1e-30, double(std::numeric_limits<float>::min()), 0x1p-149})
    with_neighbours(float(v));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> exponent(-40, 20);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  for (int i = 0; i < 200000; i++) {  // wide exponent range, every mantissa
    const uint32_t bits = uint32_t(exponent(rng) + 127) << 23 | mantissa(rng);
    xs.push_back(std::bit_cast<float>(bits));
  }
  std::uniform_real_distribution<double> subnormal(0.0, codes[size_t(1) << definition_of(f).mantissa_bits].value);
  for (int i = 0; i < 20000; i++) xs.push_back(float(subnormal(rng)));
  const size_t n = xs.size();
  for (size_t i = 0; i < n; i++) xs.push_back(-xs[i]);  // both signs
  return xs;
}

TEST(Fp8, EncodeIsTheNearestCodeTiesToEven) {
  for (const Fp8Format f : kFormats) {
    SCOPED_TRACE(fp8_format_name(f));
    const std::vector<Candidate> candidates = finite_non_negative(f);
    const std::vector<float> xs = hard_and_random_floats(f, 12345);
    int64_t wrong = 0;
    for (const float x : xs) {
      const int expected = nearest_code(x, candidates), got = fp8_encode(x, f);
      if (got != expected && wrong++ < 8)
        ADD_FAILURE() << "encode(" << x << " = " << hex(std::bit_cast<uint32_t>(x)) << ") = " << hex(uint32_t(got))
                      << ", nearest is " << hex(uint32_t(expected));
    }
    EXPECT_EQ(wrong, 0) << "of " << xs.size() << " floats";
  }
}

TEST(Fp8, TiesGoToTheEvenCode) {
  // E4M3 1.0 = 0x38, next 1.125 = 0x39, next 1.25 = 0x3a
  EXPECT_EQ(fp8_encode(1.0625f, Fp8Format::e4m3), 0x38);
  EXPECT_EQ(fp8_encode(1.1875f, Fp8Format::e4m3), 0x3a);
  EXPECT_EQ(fp8_encode(-1.1875f, Fp8Format::e4m3), 0xba);
  // between the largest subnormal (7 * 2^-9) and the smallest normal (2^-6): the normal is even
  EXPECT_EQ(fp8_encode(7.5f * 0x1p-9f, Fp8Format::e4m3), 0x08);
  // half the smallest subnormal goes to zero, anything more to the smallest subnormal
  EXPECT_EQ(fp8_encode(0x1p-10f, Fp8Format::e4m3), 0x00);
  EXPECT_EQ(fp8_encode(std::nextafter(0x1p-10f, 1.0f), Fp8Format::e4m3), 0x01);
  EXPECT_EQ(fp8_encode(-0x1p-17f, Fp8Format::e5m2), 0x80);
  EXPECT_EQ(fp8_encode(1.5f * 0x1p-16f, Fp8Format::e5m2), 0x02);  // 1.5 spacings: to 2, the even one
}

TEST(Fp8, LargeValuesAndInfinitiesSaturate) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const Fp8Format f : kFormats) {
    SCOPED_TRACE(fp8_format_name(f));
    const int max_code = f == Fp8Format::e4m3 ? 0x7e : 0x7b;
    for (const float big : {fp8_max(f), std::nextafter(fp8_max(f), inf), 2 * fp8_max(f), 1e30f, inf}) {
      EXPECT_EQ(int(fp8_encode(big, f)), max_code) << big;
      EXPECT_EQ(int(fp8_encode(-big, f)), 0x80 | max_code) << -big;
    }
    EXPECT_EQ(fp8_decode(fp8_encode(inf, f), f), fp8_max(f));
  }
  // Just below E4M3's largest: 432 lies midway between 416 = 0x7d (odd) and 448 = 0x7e (even).
  EXPECT_EQ(fp8_encode(432.0f, Fp8Format::e4m3), 0x7e);
  EXPECT_EQ(fp8_encode(std::nextafter(432.0f, 0.0f), Fp8Format::e4m3), 0x7d);
}

TEST(Fp8, NanEncodesToNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Fp8Format f : kFormats) {
    SCOPED_TRACE(fp8_format_name(f));
    for (const float x : {nan, -nan, std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffbfffffu)}) {
      const uint8_t code = fp8_encode(x, f);
      EXPECT_TRUE(std::isnan(fp8_decode(code, f))) << hex(code);
      EXPECT_EQ(code, 0x7f);  // as __nv_cvt_float_to_fp8 gives, whatever the sign and payload
    }
  }
}

}  // namespace
}  // namespace tessera
