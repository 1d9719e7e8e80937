// Fused AdamW over several steps on the GPU against the CPU twin, on fresh random inputs of odd
// sizes, outputs poisoned before each run.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/adamw.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class AdamWCuda : public testing::CudaTest {};

TEST_F(AdamWCuda, AdamWStepsMatch) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape{12345};
  Tensor param = random_tensor(shape, seed), m = Tensor::zeros(shape), v = Tensor::zeros(shape);
  Tensor param_gpu = to_gpu(param), m_gpu = to_gpu(m), v_gpu = to_gpu(v);
  AdamWParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  for (int64_t step = 1; step <= 3; step++) {
    p.step = step;
    const Tensor grad = random_tensor(shape, seed + uint64_t(step), -2.0f, 2.0f);
    adamw_update(param, grad, m, v, p);
    adamw_update(param_gpu, to_gpu(grad), m_gpu, v_gpu, p);
  }
  testing::expect_matches_cpu(param_gpu, param, 1e-6, 1e-6, 1e-5, "adamw param");
  testing::expect_matches_cpu(m_gpu, m, 1e-6, 1e-7, 1e-5, "adamw m");
  testing::expect_matches_cpu(v_gpu, v, 1e-6, 1e-7, 1e-5, "adamw v");
}

}  // namespace
}  // namespace tessera
