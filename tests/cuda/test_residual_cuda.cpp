// The residual add and in-place accumulation on the GPU against the CPU twin, on fresh random
// inputs of odd sizes, outputs poisoned before each run: fp32, and bf16 storage on aligned (16-byte
// vector) and misaligned (scalar) tensors. bf16 tensors on the CPU are refused.
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

// bf16: the fp32 sum of the two stored values is the CPU's exactly, then rounded once to nearest
// even, as the host's to_bf16 does: the GPU result is the CPU result rounded to bf16, bit for bit.
TEST_F(ResidualCuda, Bf16IsTheRoundedCpuSum) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape{5, 1001};
  const Tensor a = testing::rounded_to_bf16(random_tensor(shape, seed));
  const Tensor b = testing::rounded_to_bf16(random_tensor(shape, seed + 1));
  Tensor out = Tensor::zeros(shape), acc = testing::copy_of(a);
  residual_forward(out, a, b);
  add_inplace(acc, b);
  const Tensor out_rounded = testing::rounded_to_bf16(out), acc_rounded = testing::rounded_to_bf16(acc);
  Tensor nan = Tensor::zeros(shape);
  testing::fill(nan, testing::kNaN);
  for (const bool aligned : {true, false}) {
    SCOPED_TRACE(aligned ? "aligned" : "misaligned");
    auto on_gpu = [&](const Tensor& host) {
      return aligned ? testing::to_gpu_as(host, DType::bf16) : testing::misaligned_gpu(host, DType::bf16);
    };
    Tensor out_gpu = on_gpu(nan), acc_gpu = on_gpu(a);
    const Tensor a_gpu = on_gpu(a), b_gpu = on_gpu(b);
    residual_forward(out_gpu, a_gpu, b_gpu);
    add_inplace(acc_gpu, b_gpu);
    testing::expect_matches_cpu(out_gpu, out_rounded, 0.0, 0.0, 0.0, "residual bf16 out");
    testing::expect_matches_cpu(acc_gpu, acc_rounded, 0.0, 0.0, 0.0, "add_inplace bf16 acc");
  }
}

// CPU kernels are the fp32 reference: a bf16 tensor on the CPU is an error naming the dtype.
TEST(ResidualDtype, Bf16OnTheCpuIsRefused) {
  const Tensor x = testing::to_bf16(random_tensor({2, 3}, 1));
  Tensor out = Tensor::zeros({2, 3}, DType::bf16);
  std::string message = testing::error_of([&] { residual_forward(out, x, x); });
  EXPECT_TRUE(testing::contains(message, "bf16")) << message;
  message = testing::error_of([&] { add_inplace(out, x); });
  EXPECT_TRUE(testing::contains(message, "bf16")) << message;
}

}  // namespace
}  // namespace tessera
