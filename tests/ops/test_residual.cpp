// Residual connection: out = a + b, in-place accumulation acc += x, bad shapes.
#include <gtest/gtest.h>

#include "ops/op_testing.h"
#include "ops/residual.h"

namespace tessera {
namespace {

TEST(Residual, ForwardAddsElementwise) {
  // Large enough to take the multi-threaded path, odd so the vector loop has a tail.
  Tensor a = testing::random_tensor({3, 40001}, 91), b = testing::random_tensor({3, 40001}, 92);
  Tensor out = Tensor::zeros(a.shape());
  residual_forward(out, a, b);
  for (int64_t i = 0; i < a.numel(); i++) ASSERT_EQ(out.f32()[i], a.f32()[i] + b.f32()[i]) << i;
}

TEST(Residual, AddInplaceAccumulates) {
  Tensor x = testing::random_tensor({2, 3, 7}, 93);
  Tensor acc = testing::random_tensor({2, 3, 7}, 94);
  const Tensor start = testing::copy_of(acc);
  add_inplace(acc, x);
  add_inplace(acc, x);
  for (int64_t i = 0; i < x.numel(); i++) EXPECT_FLOAT_EQ(acc.f32()[i], start.f32()[i] + 2.0f * x.f32()[i]);
}

TEST(Residual, RejectsBadShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2}), out = Tensor::zeros({2, 3});
  EXPECT_THROW(residual_forward(out, a, b), Error);
  Tensor wrong_out = Tensor::zeros({6});
  EXPECT_THROW(residual_forward(wrong_out, a, a), Error);
  EXPECT_THROW(add_inplace(a, b), Error);
  Tensor ints = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_THROW(add_inplace(a, ints), Error);
}

}  // namespace
}  // namespace tessera
