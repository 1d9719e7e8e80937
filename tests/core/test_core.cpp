// Core: dtype conversions, tensor views, column copies, allocator counters, counter-based RNG.
#include <gtest/gtest.h>

#include <cmath>

#include "core/allocator.h"
#include "core/cuda/device.h"
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

// copy_columns: a block of columns of every row, into other columns of a wider or narrower matrix of
// the same rows, leaving the rest alone; columns outside either matrix are refused.
TEST(Tensor, CopyColumnsMovesABlockOfEveryRow) {
  Tensor src = Tensor::zeros({3, 4}), dst = Tensor::zeros({3, 6});
  for (int64_t i = 0; i < src.numel(); ++i) src.f32()[i] = float(i);
  for (int64_t i = 0; i < dst.numel(); ++i) dst.f32()[i] = -1.0f;
  copy_columns(dst, 3, src, 1, 3, 2);
  const float want[3][6] = {{-1, -1, -1, 1, 2, -1}, {-1, -1, -1, 5, 6, -1}, {-1, -1, -1, 9, 10, -1}};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 6; ++c) EXPECT_EQ(dst.f32()[r * 6 + c], want[r][c]) << r << "," << c;
  EXPECT_THROW(copy_columns(dst, 5, src, 0, 3, 2), Error);  // past dst's 6 columns
  EXPECT_THROW(copy_columns(dst, 0, src, 3, 3, 2), Error);  // past src's 4 columns
  EXPECT_THROW(copy_columns(dst, 0, src, 0, 5, 1), Error);  // 5 rows do not divide either
  Tensor ints = Tensor::zeros({3, 6}, DType::i32);
  EXPECT_THROW(copy_columns(ints, 0, src, 0, 3, 1), Error);  // another dtype
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
