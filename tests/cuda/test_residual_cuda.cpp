// The residual add and in-place accumulation on the GPU against the CPU twin, on fresh random
// inputs of odd sizes, outputs poisoned before each run.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/residual.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class ResidualCuda : public testing::CudaTest {};

TEST_F(ResidualCuda, ResidualForwardAndAddInplace) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape{5, 1001};
  const Tensor a = random_tensor(shape, seed), b = random_tensor(shape, seed + 1);
  Tensor out = Tensor::zeros(shape);
  residual_forward(out, a, b);
  Tensor out_gpu = testing::poisoned_gpu(shape);
  residual_forward(out_gpu, to_gpu(a), to_gpu(b));
  testing::expect_matches_cpu(out_gpu, out, 0.0, 0.0, 0.0, "residual out");  // one rounding: exact
  Tensor acc = testing::copy_of(a), acc_gpu = to_gpu(a);
  add_inplace(acc, b);
  add_inplace(acc_gpu, to_gpu(b));
  testing::expect_matches_cpu(acc_gpu, acc, 0.0, 0.0, 0.0, "add_inplace acc");
}

}  // namespace
}  // namespace tessera
