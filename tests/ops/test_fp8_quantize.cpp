// fp8 fake-quantize on the CPU: every element against decode(encode(x * scale)) / scale for both
// formats and several scales, amax against the test's own max |x|; 1 thread and 3 bitwise alike;
// in place; amax accumulating across calls and slots; NaN and infinity in x; bad arguments refused
// with a message naming what is wrong.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fp8.h"
#include "ops/fp8_quantize.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::contains;
using testing::error_of;

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

// x over the binades around both formats' ranges: |x| from 2^-25 to 2^18.
Tensor wide_tensor(Shape shape, uint64_t seed) { return testing::random_wide_tensor(std::move(shape), seed, -24, 18); }

float max_abs(const Tensor& x) {
  float m = 0.0f;
  for (int64_t i = 0; i < x.numel(); i++) m = std::max(m, std::fabs(x.f32()[i]));
  return m;
}

TEST(Fp8Quantize, MatchesTheElementFormula) {
  const Tensor x = wide_tensor({3, 50, 401}, 7);  // 60150 elements: above the parallel threshold
  for (const Fp8Format f : kFormats) {
    for (const float scale : {1.0f, 0x1p-7f, 64.0f, 3.0f}) {
      SCOPED_TRACE(std::string(fp8_format_name(f)) + " scale " + std::to_string(scale));
      Tensor out = Tensor::zeros(x.shape()), amax = Tensor::zeros({1});
      testing::fill(out, testing::kNaN);
      fp8_quantize_dequantize(out, x, f, scale, amax, 0);
      int64_t wrong = 0;
      for (int64_t i = 0; i < x.numel(); i++) {
        const float expected = fp8_decode(fp8_encode(x.f32()[i] * scale, f), f) / scale;
        if (std::bit_cast<uint32_t>(out.f32()[i]) != std::bit_cast<uint32_t>(expected) && wrong++ < 5)
          ADD_FAILURE() << "out[" << i << "] = " << out.f32()[i] << ", expected " << expected;
      }
      EXPECT_EQ(wrong, 0);
      EXPECT_EQ(amax.f32()[0], max_abs(x));
    }
  }
}

// With a power-of-two scale every output times the scale is an fp8 value, and the largest inputs
// saturate to +-max / scale.
TEST(Fp8Quantize, OutputsAreFp8ValuesOverTheScale) {
  const Tensor x = wide_tensor({5000}, 8);
  const float scale = 0x1p-4f;
  Tensor out = Tensor::zeros(x.shape()), amax = Tensor::zeros({1});
  fp8_quantize_dequantize(out, x, Fp8Format::e4m3, scale, amax, 0);
  int saturated = 0;
  for (int64_t i = 0; i < x.numel(); i++) {
    const float q = out.f32()[i] * scale;
    EXPECT_EQ(fp8_decode(fp8_encode(q, Fp8Format::e4m3), Fp8Format::e4m3), q) << i;
    if (std::fabs(x.f32()[i]) * scale >= 448.0f) {
      saturated++;
      EXPECT_EQ(std::fabs(out.f32()[i]), 448.0f / scale) << i;
    }
  }
  EXPECT_GT(saturated, 0);  // the test covers saturation
}

TEST(Fp8Quantize, OneThreadAndThreeAgreeBitwise) {
  const Tensor x = wide_tensor({100003}, 9);
  Tensor out1 = Tensor::zeros(x.shape()), out3 = Tensor::zeros(x.shape());
  Tensor amax1 = Tensor::zeros({1}), amax3 = Tensor::zeros({1});
  testing::with_threads(1, [&] { fp8_quantize_dequantize(out1, x, Fp8Format::e5m2, 2.0f, amax1, 0); });
  testing::with_threads(3, [&] { fp8_quantize_dequantize(out3, x, Fp8Format::e5m2, 2.0f, amax3, 0); });
  testing::expect_identical(out1, out3, "out");
  testing::expect_identical(amax1, amax3, "amax");
}

TEST(Fp8Quantize, InPlaceEqualsOutOfPlace) {
  Tensor x = wide_tensor({7, 33}, 10);
  Tensor out = Tensor::zeros(x.shape()), amax = Tensor::zeros({2});
  fp8_quantize_dequantize(out, x, Fp8Format::e4m3, 0.25f, amax, 0);
  fp8_quantize_dequantize(x, x, Fp8Format::e4m3, 0.25f, amax, 1);
  testing::expect_identical(x, out, "in place");
  EXPECT_EQ(amax.f32()[0], amax.f32()[1]);  // the max of x as it was before the call
}

TEST(Fp8Quantize, AmaxAccumulatesPerSlot) {
  const Tensor small = testing::tensor_of({3}, {0.5f, -2.0f, 1.0f});
  const Tensor large = testing::tensor_of({2}, {-7.0f, 3.0f});
  Tensor out3 = Tensor::zeros({3}), out2 = Tensor::zeros({2});
  Tensor amax = testing::tensor_of({4}, {0.0f, 0.0f, 0.0f, 100.0f});
  fp8_quantize_dequantize(out3, small, Fp8Format::e4m3, 1.0f, amax, 0);
  fp8_quantize_dequantize(out2, large, Fp8Format::e4m3, 1.0f, amax, 2);
  EXPECT_EQ(amax.f32()[0], 2.0f);
  EXPECT_EQ(amax.f32()[1], 0.0f);  // untouched
  EXPECT_EQ(amax.f32()[2], 7.0f);
  fp8_quantize_dequantize(out2, large, Fp8Format::e4m3, 1.0f, amax, 0);  // a larger max into the same slot
  EXPECT_EQ(amax.f32()[0], 7.0f);
  fp8_quantize_dequantize(out3, small, Fp8Format::e4m3, 1.0f, amax, 0);  // a smaller one keeps it
  EXPECT_EQ(amax.f32()[0], 7.0f);
  fp8_quantize_dequantize(out3, small, Fp8Format::e4m3, 1.0f, amax, 3);  // below what is there
  EXPECT_EQ(amax.f32()[3], 100.0f);
  Tensor empty = Tensor::zeros({0});
  fp8_quantize_dequantize(empty, empty, Fp8Format::e4m3, 1.0f, amax, 1);  // nothing: amax as it was
  EXPECT_EQ(amax.f32()[1], 0.0f);
}

TEST(Fp8Quantize, NanAndInfinityInX) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = testing::tensor_of({4}, {1.0f, -inf, testing::kNaN, -3.0f});
  Tensor out = Tensor::zeros({4}), amax = Tensor::zeros({2});
  fp8_quantize_dequantize(out, x, Fp8Format::e4m3, 0.5f, amax, 0);
  EXPECT_EQ(out.f32()[0], 1.0f);
  EXPECT_EQ(out.f32()[1], -448.0f / 0.5f);  // saturated
  EXPECT_TRUE(std::isnan(out.f32()[2]));
  EXPECT_EQ(out.f32()[3], -3.0f);
  EXPECT_TRUE(std::isnan(amax.f32()[0]));
  // a NaN already in amax stays, however large the new values
  fp8_quantize_dequantize(out, testing::tensor_of({4}, {1, 2, inf, 4}), Fp8Format::e4m3, 1.0f, amax, 0);
  EXPECT_TRUE(std::isnan(amax.f32()[0]));
  // an infinity without NaN is the max
  fp8_quantize_dequantize(out, testing::tensor_of({4}, {1, 2, -inf, 4}), Fp8Format::e5m2, 1.0f, amax, 1);
  EXPECT_EQ(amax.f32()[1], inf);
  EXPECT_EQ(out.f32()[2], -57344.0f);
}

TEST(Fp8Quantize, RejectsBadArguments) {
  const Tensor x = Tensor::zeros({2, 3});
  Tensor out = Tensor::zeros({2, 3}), amax = Tensor::zeros({2});
  auto error = [&](Tensor& o, const Tensor& in, float scale, Tensor& a, int64_t slot) {
    return error_of([&] { fp8_quantize_dequantize(o, in, Fp8Format::e4m3, scale, a, slot); });
  };
  Tensor out_bf16 = Tensor::zeros({2, 3}, DType::bf16), x_bf16 = Tensor::zeros({2, 3}, DType::bf16);
  EXPECT_TRUE(contains(error(out_bf16, x, 1.0f, amax, 0), "out must be f32, got bf16"));
  EXPECT_TRUE(contains(error(out_bf16, x_bf16, 1.0f, amax, 0), "x is bf16 on the CPU"));
  Tensor out_wrong = Tensor::zeros({3, 2});
  EXPECT_TRUE(contains(error(out_wrong, x, 1.0f, amax, 0), "out has shape (3, 2) but must be (2, 3)"));
  for (const float scale : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), testing::kNaN}) {
    const std::string message = error(out, x, scale, amax, 0);
    EXPECT_TRUE(contains(message, "scale = ") && contains(message, "must be finite and > 0")) << message;
  }
  EXPECT_TRUE(contains(error(out, x, 1.0f, amax, 2), "slot 2 is outside amax, which holds 2 elements"));
  EXPECT_TRUE(contains(error(out, x, 1.0f, amax, -1), "slot -1 is outside amax"));
  Tensor amax_i32 = Tensor::zeros({2}, DType::i32), no_amax;
  EXPECT_TRUE(contains(error(out, x, 1.0f, amax_i32, 0), "amax must be f32, got i32"));
  EXPECT_TRUE(contains(error(out, x, 1.0f, no_amax, 0), "amax is undefined"));
  EXPECT_EQ(amax.f32()[0], 0.0f);  // nothing written by a refused call
}

}  // namespace
}  // namespace tessera
