// GELU forward and backward on the GPU against the CPU twin, on fresh random inputs of odd sizes,
// outputs poisoned before each run: fp32, and bf16 and f16 storage against the fp32 CPU op on the
// same (rounded) inputs, on aligned (16-byte vector) and misaligned (scalar) tensors. bf16 and f16
// tensors on the CPU are refused.
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

// The bf16 and f16 kernels compute in fp32 from the same inputs as the CPU and round once, so each
// element is within the fp32 tolerance above (doubled) plus half an ulp of the dtype.
using GeluCudaLowPrecision = testing::CudaLowPrecisionTest;

TEST_P(GeluCudaLowPrecision, MatchesCpuOnRoundedInputs) {
  const DType dtype = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape{3, 37, 101};  // 11211 elements: 8-wide groups and a tail
  const Tensor x = testing::rounded_to(random_tensor(shape, seed, -5.0f, 5.0f), dtype);
  const Tensor dout = testing::rounded_to(random_tensor(shape, seed + 1), dtype);
  Tensor out = Tensor::zeros(shape), dx = Tensor::zeros(shape);
  gelu_forward(out, x);
  gelu_backward(dx, dout, x);
  Tensor nan = Tensor::zeros(shape);
  testing::fill(nan, testing::kNaN);
  const double rel_l2 = testing::scaled_from_bf16(1e-2, dtype), rtol = testing::rounding_of(dtype) + 2e-5;
  for (const bool aligned : {true, false}) {
    SCOPED_TRACE(aligned ? "aligned" : "misaligned");
    auto on_gpu = [&](const Tensor& host) {
      return aligned ? testing::to_gpu_as(host, dtype) : testing::misaligned_gpu(host, dtype);
    };
    Tensor out_gpu = on_gpu(nan), dx_gpu = on_gpu(nan);
    const Tensor x_gpu = on_gpu(x), dout_gpu = on_gpu(dout);
    gelu_forward(out_gpu, x_gpu);
    gelu_backward(dx_gpu, dout_gpu, x_gpu);
    testing::expect_matches_cpu(out_gpu, out, rel_l2, 2e-5, rtol, "gelu out");
    testing::expect_matches_cpu(dx_gpu, dx, rel_l2, 2e-5, rtol, "gelu dx");
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, GeluCudaLowPrecision, ::testing::ValuesIn(testing::kLowPrecisionDTypes),
                         testing::dtype_param_name);

// CPU kernels are the fp32 reference: a bf16 or f16 tensor on the CPU is an error naming the dtype.
TEST(GeluDtype, LowPrecisionOnTheCpuIsRefused) {
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = testing::to_storage(random_tensor({2, 3}, 1), dtype);
    Tensor out = Tensor::zeros({2, 3}, dtype), dx = Tensor::zeros({2, 3}, dtype);
    std::string message = testing::error_of([&] { gelu_forward(out, x); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { gelu_backward(dx, x, x); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
