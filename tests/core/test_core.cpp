// Core: dtype conversions, tensor views, allocator counters, counter-based RNG.
#include <gtest/gtest.h>

#include <cmath>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace tessera {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(to_float(to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(to_float(to_bf16(1.0f + 0x1p-8f)), 1.0f);               // tie goes to even
  EXPECT_EQ(to_float(to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);  // tie goes to even (up)
  EXPECT_TRUE(std::isnan(to_float(to_bf16(NAN))));
}

TEST(DType, F16RoundTripsRepresentableValues) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0x1p-24f, 0x1p-14f, 3.140625f}) EXPECT_EQ(to_float(to_f16(v)), v) << v;
  EXPECT_TRUE(std::isinf(to_float(to_f16(70000.0f))));
  EXPECT_EQ(to_float(to_f16(1.0f + 0x1p-11f)), 1.0f);  // tie to even
  EXPECT_TRUE(std::isnan(to_float(to_f16(NAN))));
}

TEST(Tensor, ViewsShareStorageAndCheckBounds) {
  Tensor flat = Tensor::zeros({10});
  Tensor v = flat.view(4, {2, 3});
  v.f32()[0] = 5.0f;
  EXPECT_EQ(flat.f32()[4], 5.0f);
  EXPECT_EQ(v.size(1), 3);
  EXPECT_THROW(flat.view(8, {3}), Error);
  EXPECT_THROW(flat.data<int32_t>(), Error);
  EXPECT_THROW(flat.reshape({3, 3}), Error);
}

TEST(Allocator, CountsLiveAndPeakBytes) {
  size_t before = host_allocator_stats().current_bytes;
  host_allocator_reset_peak();
  {
    Tensor t = Tensor::zeros({1000});
    EXPECT_EQ(host_allocator_stats().current_bytes, before + 4000);
  }
  EXPECT_EQ(host_allocator_stats().current_bytes, before);
  EXPECT_GE(host_allocator_stats().peak_bytes, before + 4000);
}

TEST(Rng, ValuesDependOnlyOnSeedNameAndIndex) {
  std::vector<float> whole(100), tail(40);
  fill_normal(whole.data(), 100, 42, "h.0.mlp.c_fc.weight", 0.0f, 0.02f);
  fill_normal(tail.data(), 40, 42, "h.0.mlp.c_fc.weight", 0.0f, 0.02f, 60);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(tail[size_t(i)], whole[size_t(60 + i)]);
  std::vector<float> other(100);
  fill_normal(other.data(), 100, 42, "h.1.mlp.c_fc.weight", 0.0f, 0.02f);
  EXPECT_NE(other[0], whole[0]);
}

TEST(Rng, NormalHasUnitMoments) {
  const int n = 200000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    double x = normal_at(1, 2, uint64_t(i));
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
}

}  // namespace tessera
