// SwiGLU forward and backward on the GPU against the CPU twin, on fresh random inputs, outputs
// poisoned before each run: fp32, and bf16 and f16 storage against the fp32 CPU op on the same
// (rounded) inputs, on aligned and misaligned tensors. F = 101 takes the scalar path, F = 64 the
// 16-byte one when aligned; gates include the saturated tails (|g| near and past 88); GeGLU too.
// bf16 and f16 tensors on the CPU are refused.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/swiglu.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

// h (N, 2F) = [gate | up]: gates uniform in [-8, 8] plus, in row 0, the saturated values below.
Tensor random_h(int64_t N, int64_t F, uint64_t seed) {
  Tensor h = random_tensor({N, 2 * F}, seed);
  const Tensor gate = random_tensor({N, F}, seed + 1, -8.0f, 8.0f);
  for (int64_t n = 0; n < N; n++)
    for (int64_t f = 0; f < F; f++) h.f32()[n * 2 * F + f] = gate.f32()[n * F + f];
  const float tails[] = {-100.0f, -88.5f, -87.5f, -20.0f, 20.0f, 87.5f, 100.0f};
  for (int64_t f = 0; f < 7 && f < F; f++) h.f32()[f] = tails[f];
  return h;
}

class SwigluCuda : public testing::CudaTest, public ::testing::WithParamInterface<int64_t> {};

// The GPU takes expf where the CPU takes exp_approx (2.5e-7 relative): a few fp32 ulp apart.
TEST_P(SwigluCuda, ForwardAndBackwardMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 3 * 37, F = GetParam();
  const Tensor h = random_h(N, F, seed), dout = random_tensor({N, F}, seed + 2);
  Tensor out = Tensor::zeros({N, F}), dh = Tensor::zeros({N, 2 * F});
  swiglu_forward(out, h);
  swiglu_backward(dh, dout, h);
  Tensor out_gpu = testing::poisoned_gpu({N, F}), dh_gpu = testing::poisoned_gpu({N, 2 * F});
  const Tensor h_gpu = to_gpu(h);
  swiglu_forward(out_gpu, h_gpu);
  swiglu_backward(dh_gpu, to_gpu(dout), h_gpu);
  testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-6, 2e-6, "swiglu out");
  testing::expect_matches_cpu(dh_gpu, dh, 1e-6, 1e-6, 2e-6, "swiglu dh");
}

// The bf16 and f16 kernels compute in fp32 from the same inputs as the CPU and round once, so each
// element is within the fp32 tolerance above (doubled) plus half an ulp of the dtype.
TEST_P(SwigluCuda, LowPrecisionMatchesCpuOnRoundedInputs) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 3 * 37, F = GetParam();
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor h = testing::rounded_to(random_h(N, F, seed), dtype);
    const Tensor dout = testing::rounded_to(random_tensor({N, F}, seed + 2), dtype);
    Tensor out = Tensor::zeros({N, F}), dh = Tensor::zeros({N, 2 * F});
    swiglu_forward(out, h);
    swiglu_backward(dh, dout, h);
    Tensor nan_out = Tensor::zeros({N, F}), nan_dh = Tensor::zeros({N, 2 * F});
    testing::fill(nan_out, testing::kNaN);
    testing::fill(nan_dh, testing::kNaN);
    const double rel_l2 = testing::scaled_from_bf16(1e-2, dtype), rtol = testing::rounding_of(dtype) + 4e-6;
    for (const bool aligned : {true, false}) {
      SCOPED_TRACE(aligned ? "aligned" : "misaligned");
      const auto on_gpu = [&](const Tensor& host) {
        return aligned ? testing::to_gpu_as(host, dtype) : testing::misaligned_gpu(host, dtype);
      };
      Tensor out_gpu = on_gpu(nan_out), dh_gpu = on_gpu(nan_dh);
      const Tensor h_gpu = on_gpu(h);
      swiglu_forward(out_gpu, h_gpu);
      swiglu_backward(dh_gpu, on_gpu(dout), h_gpu);
      testing::expect_matches_cpu(out_gpu, out, rel_l2, 2e-6, rtol, "swiglu out");
      testing::expect_matches_cpu(dh_gpu, dh, rel_l2, 2e-6, rtol, "swiglu dh");
    }
  }
}

// GeGLU: the GPU's tanhf where the CPU has tanh_approx; fp32, and bf16 within its rounding.
TEST_P(SwigluCuda, GeGluMatchesCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 3 * 37, F = GetParam();
  const GateActivation gelu = GateActivation::gelu_tanh;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor h = testing::rounded_to(random_tensor({N, 2 * F}, seed, -6.0f, 6.0f), dtype);
    const Tensor dout = testing::rounded_to(random_tensor({N, F}, seed + 2), dtype);
    Tensor out = Tensor::zeros({N, F}), dh = Tensor::zeros({N, 2 * F});
    swiglu_forward(out, h, gelu);
    swiglu_backward(dh, dout, h, gelu);
    Tensor out_gpu = testing::poisoned_gpu({N, F}, dtype), dh_gpu = testing::poisoned_gpu({N, 2 * F}, dtype);
    const Tensor h_gpu = testing::to_gpu_as(h, dtype);
    swiglu_forward(out_gpu, h_gpu, gelu);
    swiglu_backward(dh_gpu, testing::to_gpu_as(dout, dtype), h_gpu, gelu);
    const bool low = dtype != DType::f32;
    const double rel_l2 = low ? testing::scaled_from_bf16(1e-2, dtype) : 1e-6;
    const double rtol = (low ? testing::rounding_of(dtype) : 0.0) + 4e-6;
    testing::expect_matches_cpu(out_gpu, out, rel_l2, 2e-6, rtol, "geglu out");
    testing::expect_matches_cpu(dh_gpu, dh, rel_l2, 2e-6, rtol, "geglu dh");
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, SwigluCuda, ::testing::Values(int64_t(101), int64_t(64)));

// CPU kernels are the fp32 reference: a bf16 or f16 tensor on the CPU is an error naming the dtype.
TEST(SwigluDtype, LowPrecisionOnTheCpuIsRefused) {
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor h = Tensor::zeros({2, 6}, dtype), dout = Tensor::zeros({2, 3}, dtype);
    Tensor out = Tensor::zeros({2, 3}, dtype), dh = Tensor::zeros({2, 6}, dtype);
    std::string message = testing::error_of([&] { swiglu_forward(out, h); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { swiglu_backward(dh, dout, h); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
