// RMSNorm on the GPU against the CPU: out and rstd; dx written over poison (or added to); dweight accumulated onto
// existing values; the fused residual + RMSNorm forward; rows split over a group (shares of the statistics, and
// the norm from the group's sums). fp32, and bf16 and f16 storage against the
// fp32 CPU op on the same (rounded) inputs. Widths below, at and above a warp, and Llama-sized 4096
// (32 and 4096 take the 16-byte path of the 16-bit dtypes, 7 and 37 the scalar one; misaligned
// tensors take the scalar one at any width). bf16 and f16 tensors on the CPU are refused.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/cuda_testing.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

constexpr float kEps = 1e-5f;

class RmsNormCuda : public testing::CudaTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(RmsNormCuda, ForwardAndBackwardMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 4, T = 67, C = GetParam();
  const Tensor x = random_tensor({B, T, C}, seed, -2.0f, 3.0f), dout = random_tensor({B, T, C}, seed + 1);
  const Tensor weight = random_tensor({C}, seed + 2, 0.5f, 1.5f);
  Tensor out = Tensor::zeros({B, T, C}), rstd = Tensor::zeros({B, T});
  rmsnorm_forward(out, rstd, x, weight, kEps);
  Tensor out_gpu = testing::poisoned_gpu({B, T, C}), rstd_gpu = testing::poisoned_gpu({B, T});
  const Tensor x_gpu = to_gpu(x), weight_gpu = to_gpu(weight);
  rmsnorm_forward(out_gpu, rstd_gpu, x_gpu, weight_gpu, kEps);
  testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-5, 1e-5, "rmsnorm out");
  testing::expect_matches_cpu(rstd_gpu, rstd, 1e-5, 1e-6, 1e-5, "rmsnorm rstd");

  Tensor dx = Tensor::zeros({B, T, C}), dw = random_tensor({C}, seed + 4);
  Tensor dx_gpu = testing::poisoned_gpu({B, T, C}), dw_gpu = to_gpu(dw);
  rmsnorm_backward(dx, dw, dout, x, weight, rstd);
  rmsnorm_backward(dx_gpu, dw_gpu, to_gpu(dout), x_gpu, weight_gpu, to_gpu(rstd));
  testing::expect_matches_cpu(dx_gpu, dx, 1e-5, 1e-5, 1e-4, "rmsnorm dx");
  testing::expect_matches_cpu(dw_gpu, dw, 1e-5, 1e-4, 1e-4, "rmsnorm dweight");
}

// bf16 or f16 x/out/dout/dx/weight, f32 rstd and dweight. The GPU sums the same rounded values in
// fp32 (in another order) and rounds out and dx once: they get the fp32 tolerances above doubled
// plus half an ulp of the dtype; the fp32 outputs keep the fp32 tolerances (rstd's relative L2
// 1e-5 everywhere: 4096 squares summed in another order land above 1e-6). Aligned tensors take
// the 16-byte path where C allows it, misaligned ones the scalar path.
TEST_P(RmsNormCuda, LowPrecisionMatchesCpuOnRoundedInputs) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 4, T = 67, C = GetParam();
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto rounded = [dtype](const Tensor& t) { return testing::rounded_to(t, dtype); };
    const Tensor x = rounded(random_tensor({B, T, C}, seed, -2.0f, 3.0f));
    const Tensor dout = rounded(random_tensor({B, T, C}, seed + 1));
    const Tensor weight = rounded(random_tensor({C}, seed + 2, 0.5f, 1.5f));
    Tensor out = Tensor::zeros({B, T, C}), rstd = Tensor::zeros({B, T});
    rmsnorm_forward(out, rstd, x, weight, kEps);
    const Tensor dw_init = random_tensor({C}, seed + 4);
    Tensor dx = Tensor::zeros({B, T, C}), dw = testing::copy_of(dw_init);
    rmsnorm_backward(dx, dw, dout, x, weight, rstd);
    Tensor nan = Tensor::zeros({B, T, C});
    testing::fill(nan, testing::kNaN);
    const double rel_l2 = testing::scaled_from_bf16(1e-2, dtype), rounding = testing::rounding_of(dtype);
    for (const bool aligned : {true, false}) {
      SCOPED_TRACE(aligned ? "aligned" : "misaligned");
      const auto on_gpu = [&](const Tensor& host) {
        return aligned ? testing::to_gpu_as(host, dtype) : testing::misaligned_gpu(host, dtype);
      };
      Tensor out_gpu = on_gpu(nan), rstd_gpu = testing::poisoned_gpu({B, T});
      const Tensor x_gpu = on_gpu(x), weight_gpu = on_gpu(weight);
      rmsnorm_forward(out_gpu, rstd_gpu, x_gpu, weight_gpu, kEps);
      testing::expect_matches_cpu(out_gpu, out, rel_l2, 2e-5, rounding + 2e-5, "rmsnorm out");
      testing::expect_matches_cpu(rstd_gpu, rstd, 1e-5, 1e-6, 1e-5, "rmsnorm rstd");

      Tensor dx_gpu = on_gpu(nan), dw_gpu = to_gpu(dw_init);
      rmsnorm_backward(dx_gpu, dw_gpu, on_gpu(dout), x_gpu, weight_gpu, to_gpu(rstd));
      testing::expect_matches_cpu(dx_gpu, dx, rel_l2, 2e-5, rounding + 2e-4, "rmsnorm dx");
      testing::expect_matches_cpu(dw_gpu, dw, 1e-5, 1e-4, 1e-4, "rmsnorm dweight");

      // GradInto::add: onto values in the dtype, the gradient added in fp32 and rounded once; dweight
      // gathers a second gradient (on a copy of the CPU's: the next layout starts from dw again).
      const Tensor held = rounded(random_tensor({B, T, C}, seed + 6, -3.0f, 3.0f));
      Tensor dx_added = testing::copy_of(held), dx_added_gpu = on_gpu(held), dw_twice = testing::copy_of(dw);
      rmsnorm_backward(dx_added, dw_twice, dout, x, weight, rstd, GradInto::add);
      rmsnorm_backward(dx_added_gpu, dw_gpu, on_gpu(dout), x_gpu, weight_gpu, to_gpu(rstd), GradInto::add);
      testing::expect_matches_cpu(dx_added_gpu, dx_added, rel_l2, 2e-5, rounding + 2e-4, "rmsnorm dx added");
      testing::expect_matches_cpu(dw_gpu, dw_twice, 1e-5, 1e-4, 1e-4, "rmsnorm dweight twice");
    }
  }
}

// The fused kernel against (1) the CPU: residual_out is a + b rounded to the dtype, exactly, and
// out, rstd are RMSNorm of that rounded sum within the tolerances above; (2) the unfused GPU ops
// residual_forward then rmsnorm_forward: the same bits.
TEST_P(RmsNormCuda, ResidualRmsNormForwardMatchesUnfused) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 4, T = 67, C = GetParam();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto rounded = [dtype](const Tensor& t) { return testing::rounded_to(t, dtype); };  // what the GPU stores
    const Tensor a = rounded(random_tensor({B, T, C}, seed, -2.0f, 3.0f));
    const Tensor b = rounded(random_tensor({B, T, C}, seed + 1));
    const Tensor weight = rounded(random_tensor({C}, seed + 2, 0.5f, 1.5f));
    Tensor sum = Tensor::zeros({B, T, C}), out = Tensor::zeros({B, T, C}), rstd = Tensor::zeros({B, T});
    residual_forward(sum, a, b);
    const Tensor residual = rounded(sum);
    rmsnorm_forward(out, rstd, residual, weight, kEps);

    const Tensor a_gpu = testing::to_gpu_as(a, dtype), b_gpu = testing::to_gpu_as(b, dtype);
    const Tensor weight_gpu = testing::to_gpu_as(weight, dtype);
    Tensor residual_gpu = testing::poisoned_gpu({B, T, C}, dtype), out_gpu = testing::poisoned_gpu({B, T, C}, dtype);
    Tensor rstd_gpu = testing::poisoned_gpu({B, T});
    residual_rmsnorm_forward(residual_gpu, out_gpu, rstd_gpu, a_gpu, b_gpu, weight_gpu, kEps);
    testing::expect_matches_cpu(residual_gpu, residual, 0.0, 0.0, 0.0, "fused residual_out");
    if (dtype == DType::f32)
      testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-5, 1e-5, "fused out");
    else
      testing::expect_matches_cpu(out_gpu, out, testing::scaled_from_bf16(1e-2, dtype), 2e-5,
                                  testing::rounding_of(dtype) + 2e-5, "fused out");
    testing::expect_matches_cpu(rstd_gpu, rstd, 1e-5, 1e-6, 1e-5, "fused rstd");

    Tensor residual2 = testing::poisoned_gpu({B, T, C}, dtype), out2 = testing::poisoned_gpu({B, T, C}, dtype);
    Tensor rstd2 = testing::poisoned_gpu({B, T});
    residual_forward(residual2, a_gpu, b_gpu);
    rmsnorm_forward(out2, rstd2, residual2, weight_gpu, kEps);
    const auto host = [](const Tensor& t) { return testing::to_f32(testing::to_cpu(t)); };
    testing::expect_identical(host(out_gpu), host(out2), "fused out against unfused");
    testing::expect_identical(host(rstd_gpu), host(rstd2), "fused rstd against unfused");
  }
}

// Rows split over a group (OLMo 2's query/key norms under tensor parallelism): this rank's shares of
// the statistics, and the grouped forward and backward from the group's sums (here this rank's and
// as much again from an imagined other rank: width 2C), against the CPU on the same (rounded) inputs.
TEST_P(RmsNormCuda, GroupedRowsMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 4 * 67, C = GetParam();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto rounded = [dtype](const Tensor& t) { return testing::rounded_to(t, dtype); };
    const Tensor x = rounded(random_tensor({N, C}, seed, -2.0f, 3.0f)), dout = rounded(random_tensor({N, C}, seed + 1));
    const Tensor weight = rounded(random_tensor({C}, seed + 2, 0.5f, 1.5f));
    const Tensor other = random_tensor({N}, seed + 3, 0.0f, float(C));  // the other rank's shares
    const auto plus_other = [&](Tensor t) {
      for (int64_t n = 0; n < N; n++) t.f32()[n] += other.f32()[n];
      return t;
    };
    Tensor sums = Tensor::zeros({N}), out = Tensor::zeros({N, C}), rstd = Tensor::zeros({N});
    rmsnorm_partial_sums(sums, x);
    const Tensor group_sums = plus_other(testing::copy_of(sums));
    rmsnorm_grouped_forward(out, rstd, x, weight, group_sums, 2 * C, kEps);
    Tensor dots = Tensor::zeros({N});
    rmsnorm_partial_dots(dots, dout, x, weight, rstd);
    const Tensor group_dots = plus_other(testing::copy_of(dots));
    Tensor dx = Tensor::zeros({N, C}), dw = Tensor::zeros({C});
    rmsnorm_grouped_backward(dx, dw, dout, x, weight, rstd, group_dots, 2 * C);

    const Tensor x_gpu = testing::to_gpu_as(x, dtype), weight_gpu = testing::to_gpu_as(weight, dtype);
    const Tensor dout_gpu = testing::to_gpu_as(dout, dtype);
    const double low = dtype == DType::f32 ? 0.0 : 1.0;  // the 16-bit outputs' extra: rounding once
    Tensor sums_gpu = testing::poisoned_gpu({N});
    rmsnorm_partial_sums(sums_gpu, x_gpu);
    testing::expect_matches_cpu(sums_gpu, sums, 1e-5, 1e-6, 1e-5, "partial sums");
    Tensor out_gpu = testing::poisoned_gpu({N, C}, dtype), rstd_gpu = testing::poisoned_gpu({N});
    rmsnorm_grouped_forward(out_gpu, rstd_gpu, x_gpu, weight_gpu, to_gpu(group_sums), 2 * C, kEps);
    testing::expect_matches_cpu(out_gpu, out, 1e-6 + low * testing::scaled_from_bf16(1e-2, dtype), 2e-5,
                                low * testing::rounding_of(dtype) + 2e-5, "grouped out");
    testing::expect_matches_cpu(rstd_gpu, rstd, 1e-6, 0.0, 1e-6, "grouped rstd");
    Tensor dots_gpu = testing::poisoned_gpu({N});
    rmsnorm_partial_dots(dots_gpu, dout_gpu, x_gpu, weight_gpu, to_gpu(rstd));
    testing::expect_matches_cpu(dots_gpu, dots, 1e-5, 1e-5, 1e-4, "partial dots");
    Tensor dx_gpu = testing::poisoned_gpu({N, C}, dtype), dw_gpu = to_gpu(Tensor::zeros({C}));
    rmsnorm_grouped_backward(dx_gpu, dw_gpu, dout_gpu, x_gpu, weight_gpu, to_gpu(rstd), to_gpu(group_dots), 2 * C);
    testing::expect_matches_cpu(dx_gpu, dx, 1e-5 + low * testing::scaled_from_bf16(1e-2, dtype), 2e-5,
                                low * testing::rounding_of(dtype) + 2e-4, "grouped dx");
    testing::expect_matches_cpu(dw_gpu, dw, 1e-5, 1e-4, 1e-4, "grouped dweight");
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, RmsNormCuda,
                         ::testing::Values(int64_t(7), int64_t(32), int64_t(37), int64_t(4096)));

// Rows scaled by 10^-n, so that eps dominates the small ones (the CPU test's multiscale rows).
using RmsNormCudaEps = testing::CudaTest;

TEST_F(RmsNormCudaEps, EpsDominatedRowsMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 8, C = 64;
  Tensor x = random_tensor({N, C}, seed, -2.0f, 2.0f);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) x.f32()[n * C + c] *= float(std::pow(10.0, -double(n)));
  const Tensor weight = random_tensor({C}, seed + 1, 0.5f, 1.5f);
  for (const float eps : {1e-5f, 1e-6f}) {
    SCOPED_TRACE(eps);
    Tensor out = Tensor::zeros({N, C}), rstd = Tensor::zeros({N});
    rmsnorm_forward(out, rstd, x, weight, eps);
    Tensor out_gpu = testing::poisoned_gpu({N, C}), rstd_gpu = testing::poisoned_gpu({N});
    rmsnorm_forward(out_gpu, rstd_gpu, to_gpu(x), to_gpu(weight), eps);
    testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-6, 1e-5, "rmsnorm out");
    testing::expect_matches_cpu(rstd_gpu, rstd, 1e-6, 0.0, 1e-5, "rmsnorm rstd");
  }
}

// CPU kernels are the fp32 reference: bf16 or f16 activations on the CPU are an error naming the dtype.
TEST(RmsNormDtype, LowPrecisionOnTheCpuIsRefused) {
  const int64_t N = 2, C = 8;
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = Tensor::zeros({N, C}, dtype), weight = Tensor::zeros({C}, dtype);
    Tensor out = Tensor::zeros({N, C}, dtype), residual = Tensor::zeros({N, C}, dtype);
    Tensor rstd = Tensor::zeros({N}), dw = Tensor::zeros({C});
    std::string message = testing::error_of([&] { rmsnorm_forward(out, rstd, x, weight, kEps); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { residual_rmsnorm_forward(residual, out, rstd, x, x, weight, kEps); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { rmsnorm_backward(out, dw, x, x, weight, rstd); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
