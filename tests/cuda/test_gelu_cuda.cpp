// GELU forward and backward on the GPU against the CPU twin, on fresh random inputs of odd sizes,
// outputs poisoned before each run: fp32, and bf16 storage against the fp32 CPU op on the same
// (bf16-rounded) inputs, on aligned (16-byte vector) and misaligned (scalar) tensors. bf16 tensors
// on the CPU are refused.
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

// The bf16 kernels compute in fp32 from the same inputs as the CPU and round once, so each element
// is within the fp32 tolerance above plus half a bf16 ulp.
TEST_F(GeluCuda, Bf16MatchesCpuOnRoundedInputs) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape{3, 37, 101};  // 11211 elements: 8-wide groups and a tail
  const Tensor x = testing::rounded_to_bf16(random_tensor(shape, seed, -5.0f, 5.0f));
  const Tensor dout = testing::rounded_to_bf16(random_tensor(shape, seed + 1));
  Tensor out = Tensor::zeros(shape), dx = Tensor::zeros(shape);
  gelu_forward(out, x);
  gelu_backward(dx, dout, x);
  Tensor nan = Tensor::zeros(shape);
  testing::fill(nan, testing::kNaN);
  for (const bool aligned : {true, false}) {
    SCOPED_TRACE(aligned ? "aligned" : "misaligned");
    auto on_gpu = [&](const Tensor& host) {
      return aligned ? testing::to_gpu_as(host, DType::bf16) : testing::misaligned_gpu(host, DType::bf16);
    };
    Tensor out_gpu = on_gpu(nan), dx_gpu = on_gpu(nan);
    const Tensor x_gpu = on_gpu(x), dout_gpu = on_gpu(dout);
    gelu_forward(out_gpu, x_gpu);
    gelu_backward(dx_gpu, dout_gpu, x_gpu);
    testing::expect_matches_cpu(out_gpu, out, 1e-2, 2e-5, testing::kBf16Rounding + 2e-5, "gelu bf16 out");
    testing::expect_matches_cpu(dx_gpu, dx, 1e-2, 2e-5, testing::kBf16Rounding + 2e-5, "gelu bf16 dx");
  }
}

// CPU kernels are the fp32 reference: a bf16 tensor on the CPU is an error naming the dtype.
TEST(GeluDtype, Bf16OnTheCpuIsRefused) {
  const Tensor x = testing::to_bf16(random_tensor({2, 3}, 1));
  Tensor out = Tensor::zeros({2, 3}, DType::bf16), dx = Tensor::zeros({2, 3}, DType::bf16);
  std::string message = testing::error_of([&] { gelu_forward(out, x); });
  EXPECT_TRUE(testing::contains(message, "bf16")) << message;
  message = testing::error_of([&] { gelu_backward(dx, x, x); });
  EXPECT_TRUE(testing::contains(message, "bf16")) << message;
}

}  // namespace
}  // namespace tessera
