// The squared norm (fp64, deterministic) and in-place scale on the GPU against the CPU twin, on
// fresh random inputs of odd sizes (the norm's multiples of 4 take its 16-byte loads).
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/norm.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class NormCuda : public testing::CudaTest {};

TEST_F(NormCuda, SquaredNormMatchesAndRepeatsBitForBit) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(3) * 1000 * 1000, int64_t(3) * 1000 * 1000 + 7}) {
    const Tensor x = random_tensor({n}, seed + uint64_t(n), -3.0f, 3.0f);
    const Tensor x_gpu = to_gpu(x);
    const double cpu = squared_norm(x), gpu = squared_norm(x_gpu);
    EXPECT_NEAR(gpu, cpu, 1e-12 * cpu) << "n = " << n;
    EXPECT_EQ(squared_norm(x_gpu), gpu) << "n = " << n << ": a second run differs";
  }
}

TEST_F(NormCuda, ScaleInplace) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  Tensor x = random_tensor({4097}, seed);
  Tensor x_gpu = to_gpu(x);
  scale_inplace(x, 0.37f);
  scale_inplace(x_gpu, 0.37f);
  testing::expect_matches_cpu(x_gpu, x, 0.0, 0.0, 0.0, "scaled x");
}

}  // namespace
}  // namespace tessera
