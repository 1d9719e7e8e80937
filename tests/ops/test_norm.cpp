// Grad-norm reductions: squared_norm in double across partial blocks and threads, scale_inplace.
#include <gtest/gtest.h>

#include "ops/norm.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

TEST(Norm, SquaredNormMatchesDoubleSum) {
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8192), int64_t(100003)}) {
    Tensor x = testing::random_tensor({n}, 131, -3.0f, 3.0f);
    double ref = 0.0;
    for (int64_t i = 0; i < n; i++) ref += double(x.f32()[i]) * x.f32()[i];
    EXPECT_NEAR(squared_norm(x), ref, 1e-12 * ref) << "n=" << n;
  }
}

TEST(Norm, SquaredNormKeepsPrecisionOfManySmallValues) {
  // 2^22 values of 1e-3: a float running sum would stall far below the true 4194.304.
  Tensor x = Tensor::zeros({int64_t(1) << 22});
  testing::fill(x, 1e-3f);
  const double expected = double(x.numel()) * double(1e-3f) * double(1e-3f);
  EXPECT_NEAR(squared_norm(x), expected, 1e-9 * expected);
}

TEST(Norm, ScaleInplaceMultiplies) {
  Tensor x = testing::random_tensor({3, 50001}, 132);
  const Tensor before = testing::copy_of(x);
  scale_inplace(x, -0.375f);
  for (int64_t i = 0; i < x.numel(); i++) ASSERT_EQ(x.f32()[i], before.f32()[i] * -0.375f) << i;
}

TEST(Norm, RejectsNonFloatTensors) {
  Tensor ints = Tensor::zeros({4}, DType::i32);
  EXPECT_THROW(squared_norm(ints), Error);
  EXPECT_THROW(scale_inplace(ints, 2.0f), Error);
  Tensor undefined;
  EXPECT_THROW(squared_norm(undefined), Error);
}

}  // namespace
}  // namespace tessera
