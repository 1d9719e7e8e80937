// GELU forward and backward on the GPU against the CPU twin, on fresh random inputs of odd sizes,
// outputs poisoned before each run.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/gelu.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class GeluCuda : public testing::CudaTest {};

TEST_F(GeluCuda, GeluForwardAndBackward) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape{3, 37, 101};
  const Tensor x = random_tensor(shape, seed, -5.0f, 5.0f), dout = random_tensor(shape, seed + 1);
  Tensor out = Tensor::zeros(shape), dx = Tensor::zeros(shape);
  gelu_forward(out, x);
  gelu_backward(dx, dout, x);
  Tensor out_gpu = testing::poisoned_gpu(shape), dx_gpu = testing::poisoned_gpu(shape);
  const Tensor x_gpu = to_gpu(x), dout_gpu = to_gpu(dout);
  gelu_forward(out_gpu, x_gpu);
  gelu_backward(dx_gpu, dout_gpu, x_gpu);
  // atol 1e-5: in the far negative tail the CPU's tanh saturates to -1 a little earlier than tanhf
  testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-5, 1e-5, "gelu out");
  testing::expect_matches_cpu(dx_gpu, dx, 1e-6, 1e-5, 1e-5, "gelu dx");
}

}  // namespace
}  // namespace tessera
