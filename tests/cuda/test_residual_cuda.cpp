// The residual add and in-place accumulation on the GPU against the CPU twin, on fresh random
// inputs of odd sizes, outputs poisoned before each run: fp32, and bf16 and f16 storage on aligned
// (16-byte vector) and misaligned (scalar) tensors. bf16 and f16 tensors on the CPU are refused.
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

// bf16 and f16: the fp32 sum of the two stored values is the CPU's exactly, then rounded once to
// nearest even, as the host's conversion does: the GPU result is the CPU result rounded to the
// dtype, bit for bit.
using ResidualCudaLowPrecision = testing::CudaLowPrecisionTest;

TEST_P(ResidualCudaLowPrecision, IsTheRoundedCpuSum) {
  const DType dtype = GetParam();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape{5, 1001};
  const Tensor a = testing::rounded_to(random_tensor(shape, seed), dtype);
  const Tensor b = testing::rounded_to(random_tensor(shape, seed + 1), dtype);
  Tensor out = Tensor::zeros(shape), acc = testing::copy_of(a);
  residual_forward(out, a, b);
  add_inplace(acc, b);
  const Tensor out_rounded = testing::rounded_to(out, dtype), acc_rounded = testing::rounded_to(acc, dtype);
  Tensor nan = Tensor::zeros(shape);
  testing::fill(nan, testing::kNaN);
  for (const bool aligned : {true, false}) {
    SCOPED_TRACE(aligned ? "aligned" : "misaligned");
    auto on_gpu = [&](const Tensor& host) {
      return aligned ? testing::to_gpu_as(host, dtype) : testing::misaligned_gpu(host, dtype);
    };
    Tensor out_gpu = on_gpu(nan), acc_gpu = on_gpu(a);
    const Tensor a_gpu = on_gpu(a), b_gpu = on_gpu(b);
    residual_forward(out_gpu, a_gpu, b_gpu);
    add_inplace(acc_gpu, b_gpu);
    testing::expect_matches_cpu(out_gpu, out_rounded, 0.0, 0.0, 0.0, "residual out");
    testing::expect_matches_cpu(acc_gpu, acc_rounded, 0.0, 0.0, 0.0, "add_inplace acc");
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, ResidualCudaLowPrecision, ::testing::ValuesIn(testing::kLowPrecisionDTypes),
                         testing::dtype_param_name);

// CPU kernels are the fp32 reference: a bf16 or f16 tensor on the CPU is an error naming the dtype.
TEST(ResidualDtype, LowPrecisionOnTheCpuIsRefused) {
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = testing::to_storage(random_tensor({2, 3}, 1), dtype);
    Tensor out = Tensor::zeros({2, 3}, dtype);
    std::string message = testing::error_of([&] { residual_forward(out, x, x); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { add_inplace(out, x); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
