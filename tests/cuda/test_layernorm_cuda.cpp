// LayerNorm on the GPU against the CPU: out, mean, rstd; dx written over poison (or added to); dweight and dbias
// accumulated onto existing values; the fused residual + LayerNorm forward. fp32, and bf16 and f16
// storage against the fp32 CPU op on the same (rounded) inputs. Widths below, at and above a warp,
// GPT-2's 768, 1024, GPT-2 XL's 1600, Llama 3 8B's 4096 and 4104 just past it (all but 7 and 37 take the
// 16-byte path of the 16-bit dtypes). The backward fuses the parameter gradients with a warp per row up
// to 768 in 16 bits (96 in fp32), with 2, 4 or 8 warps per row up to 1024, 2048 and 4096 (512 in fp32:
// 320 takes 8), and runs two kernels above: every form runs in some dtype. The backward gives the same
// bits every time.
// bf16 and f16 tensors on the CPU are refused.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/layernorm.h"
#include "ops/residual.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class LayerNormCuda : public testing::CudaTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(LayerNormCuda, ForwardAndBackwardMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 4, T = 67, C = GetParam();
  const Tensor x = random_tensor({B, T, C}, seed, -2.0f, 3.0f), dout = random_tensor({B, T, C}, seed + 1);
  const Tensor weight = random_tensor({C}, seed + 2, 0.5f, 1.5f), bias = random_tensor({C}, seed + 3);
  Tensor out = Tensor::zeros({B, T, C}), mean = Tensor::zeros({B, T}), rstd = Tensor::zeros({B, T});
  layernorm_forward(out, mean, rstd, x, weight, bias);
  Tensor out_gpu = testing::poisoned_gpu({B, T, C}), mean_gpu = testing::poisoned_gpu({B, T}),
         rstd_gpu = testing::poisoned_gpu({B, T});
  const Tensor x_gpu = to_gpu(x), weight_gpu = to_gpu(weight);
  layernorm_forward(out_gpu, mean_gpu, rstd_gpu, x_gpu, weight_gpu, to_gpu(bias));
  testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-5, 1e-5, "layernorm out");
  testing::expect_matches_cpu(mean_gpu, mean, 1e-6, 1e-6, 1e-5, "layernorm mean");
  testing::expect_matches_cpu(rstd_gpu, rstd, 1e-6, 1e-6, 1e-5, "layernorm rstd");

  Tensor dx = Tensor::zeros({B, T, C}), dw = random_tensor({C}, seed + 4), db = random_tensor({C}, seed + 5);
  Tensor dx_gpu = testing::poisoned_gpu({B, T, C}), dw_gpu = to_gpu(dw), db_gpu = to_gpu(db);
  layernorm_backward(dx, dw, db, dout, x, weight, mean, rstd);
  layernorm_backward(dx_gpu, dw_gpu, db_gpu, to_gpu(dout), x_gpu, weight_gpu, to_gpu(mean), to_gpu(rstd));
  testing::expect_matches_cpu(dx_gpu, dx, 1e-5, 1e-5, 1e-4, "layernorm dx");
  testing::expect_matches_cpu(dw_gpu, dw, 1e-5, 1e-4, 1e-4, "layernorm dweight");
  testing::expect_matches_cpu(db_gpu, db, 1e-5, 1e-4, 1e-4, "layernorm dbias");
}

// bf16 or f16 x/out/dout/dx/weight/bias, f32 statistics and parameter gradients. The GPU sums the
// same rounded values in fp32 (in another order) and rounds out and dx once: they get the fp32
// tolerances above doubled plus half an ulp of the dtype; the fp32 outputs keep the fp32 tolerances.
TEST_P(LayerNormCuda, LowPrecisionMatchesCpuOnRoundedInputs) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 3, T = 67, C = GetParam();  // 201 rows: a group of warps' last rows leave some idle
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto rounded = [dtype](const Tensor& t) { return testing::rounded_to(t, dtype); };
    const auto on_gpu = [dtype](const Tensor& t) { return testing::to_gpu_as(t, dtype); };
    const Tensor x = rounded(random_tensor({B, T, C}, seed, -2.0f, 3.0f));
    const Tensor dout = rounded(random_tensor({B, T, C}, seed + 1));
    const Tensor weight = rounded(random_tensor({C}, seed + 2, 0.5f, 1.5f));
    const Tensor bias = rounded(random_tensor({C}, seed + 3));
    Tensor out = Tensor::zeros({B, T, C}), mean = Tensor::zeros({B, T}), rstd = Tensor::zeros({B, T});
    layernorm_forward(out, mean, rstd, x, weight, bias);
    Tensor out_gpu = testing::poisoned_gpu({B, T, C}, dtype), mean_gpu = testing::poisoned_gpu({B, T}),
           rstd_gpu = testing::poisoned_gpu({B, T});
    const Tensor x_gpu = on_gpu(x), weight_gpu = on_gpu(weight);
    layernorm_forward(out_gpu, mean_gpu, rstd_gpu, x_gpu, weight_gpu, on_gpu(bias));
    const double rel_l2 = testing::scaled_from_bf16(1e-2, dtype), rounding = testing::rounding_of(dtype);
    testing::expect_matches_cpu(out_gpu, out, rel_l2, 2e-5, rounding + 2e-5, "layernorm out");
    testing::expect_matches_cpu(mean_gpu, mean, 1e-6, 1e-6, 1e-5, "layernorm mean");
    testing::expect_matches_cpu(rstd_gpu, rstd, 1e-6, 1e-6, 1e-5, "layernorm rstd");

    Tensor dx = Tensor::zeros({B, T, C}), dw = random_tensor({C}, seed + 4), db = random_tensor({C}, seed + 5);
    Tensor dx_gpu = testing::poisoned_gpu({B, T, C}, dtype), dw_gpu = to_gpu(dw), db_gpu = to_gpu(db);
    layernorm_backward(dx, dw, db, dout, x, weight, mean, rstd);
    layernorm_backward(dx_gpu, dw_gpu, db_gpu, on_gpu(dout), x_gpu, weight_gpu, to_gpu(mean), to_gpu(rstd));
    testing::expect_matches_cpu(dx_gpu, dx, rel_l2, 2e-5, rounding + 2e-4, "layernorm dx");
    testing::expect_matches_cpu(dw_gpu, dw, 1e-5, 1e-4, 1e-4, "layernorm dweight");
    testing::expect_matches_cpu(db_gpu, db, 1e-5, 1e-4, 1e-4, "layernorm dbias");

    // GradInto::add: onto values in the dtype, the gradient added in fp32 and rounded once.
    const Tensor held = rounded(random_tensor({B, T, C}, seed + 6, -3.0f, 3.0f));
    Tensor dx_added = testing::copy_of(held), dx_added_gpu = on_gpu(held);
    layernorm_backward(dx_added, dw, db, dout, x, weight, mean, rstd, GradInto::add);
    layernorm_backward(dx_added_gpu, dw_gpu, db_gpu, on_gpu(dout), x_gpu, weight_gpu, to_gpu(mean), to_gpu(rstd),
                       GradInto::add);
    testing::expect_matches_cpu(dx_added_gpu, dx_added, rel_l2, 2e-5, rounding + 2e-4, "layernorm dx added");
  }
}

// The fused kernel against (1) the CPU: residual_out is a + b rounded to the dtype, exactly, and
// out, mean, rstd are LayerNorm of that rounded sum within the tolerances above; (2) the unfused
// GPU ops residual_forward then layernorm_forward: the same bits.
TEST_P(LayerNormCuda, ResidualLayerNormForwardMatchesUnfused) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 4, T = 67, C = GetParam();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto rounded = [dtype](const Tensor& t) { return testing::rounded_to(t, dtype); };  // what the GPU stores
    const Tensor a = rounded(random_tensor({B, T, C}, seed, -2.0f, 3.0f));
    const Tensor b = rounded(random_tensor({B, T, C}, seed + 1));
    const Tensor weight = rounded(random_tensor({C}, seed + 2, 0.5f, 1.5f));
    const Tensor bias = rounded(random_tensor({C}, seed + 3));
    Tensor sum = Tensor::zeros({B, T, C}), out = Tensor::zeros({B, T, C});
    Tensor mean = Tensor::zeros({B, T}), rstd = Tensor::zeros({B, T});
    residual_forward(sum, a, b);
    const Tensor residual = rounded(sum);
    layernorm_forward(out, mean, rstd, residual, weight, bias);

    const Tensor a_gpu = testing::to_gpu_as(a, dtype), b_gpu = testing::to_gpu_as(b, dtype);
    const Tensor weight_gpu = testing::to_gpu_as(weight, dtype), bias_gpu = testing::to_gpu_as(bias, dtype);
    Tensor residual_gpu = testing::poisoned_gpu({B, T, C}, dtype), out_gpu = testing::poisoned_gpu({B, T, C}, dtype);
    Tensor mean_gpu = testing::poisoned_gpu({B, T}), rstd_gpu = testing::poisoned_gpu({B, T});
    residual_layernorm_forward(residual_gpu, out_gpu, mean_gpu, rstd_gpu, a_gpu, b_gpu, weight_gpu, bias_gpu);
    testing::expect_matches_cpu(residual_gpu, residual, 0.0, 0.0, 0.0, "fused residual_out");
    if (dtype == DType::f32)
      testing::expect_matches_cpu(out_gpu, out, 1e-6, 1e-5, 1e-5, "fused out");
    else
      testing::expect_matches_cpu(out_gpu, out, testing::scaled_from_bf16(1e-2, dtype), 2e-5,
                                  testing::rounding_of(dtype) + 2e-5, "fused out");
    testing::expect_matches_cpu(mean_gpu, mean, 1e-6, 1e-6, 1e-5, "fused mean");
    testing::expect_matches_cpu(rstd_gpu, rstd, 1e-6, 1e-6, 1e-5, "fused rstd");

    Tensor residual2 = testing::poisoned_gpu({B, T, C}, dtype), out2 = testing::poisoned_gpu({B, T, C}, dtype);
    Tensor mean2 = testing::poisoned_gpu({B, T}), rstd2 = testing::poisoned_gpu({B, T});
    residual_forward(residual2, a_gpu, b_gpu);
    layernorm_forward(out2, mean2, rstd2, residual2, weight_gpu, bias_gpu);
    const auto host = [](const Tensor& t) { return testing::to_f32(testing::to_cpu(t)); };
    testing::expect_identical(host(out_gpu), host(out2), "fused out against unfused");
    testing::expect_identical(host(mean_gpu), host(mean2), "fused mean against unfused");
    testing::expect_identical(host(rstd_gpu), host(rstd2), "fused rstd against unfused");
  }
}

// Twice from the same gradients: bitwise the same dx, dweight and dbias (no atomics, a fixed order).
TEST_P(LayerNormCuda, BackwardIsBitwiseDeterministic) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t B = 4, T = 67, C = GetParam();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto on_gpu = [dtype](const Tensor& t) { return testing::to_gpu_as(t, dtype); };
    const Tensor x = on_gpu(random_tensor({B, T, C}, seed, -2.0f, 3.0f));
    const Tensor dout = on_gpu(random_tensor({B, T, C}, seed + 1));
    const Tensor weight = on_gpu(random_tensor({C}, seed + 2, 0.5f, 1.5f));
    const Tensor mean = to_gpu(random_tensor({B, T}, seed + 3));
    const Tensor rstd = to_gpu(random_tensor({B, T}, seed + 4, 0.5f, 2.0f));
    Tensor results[2][3];
    for (Tensor(&r)[3] : results) {
      r[0] = testing::poisoned_gpu({B, T, C}, dtype);
      r[1] = to_gpu(random_tensor({C}, seed + 5));
      r[2] = to_gpu(random_tensor({C}, seed + 6));
      layernorm_backward(r[0], r[1], r[2], dout, x, weight, mean, rstd);
    }
    for (int i = 0; i < 3; i++)
      testing::expect_identical(testing::to_f32(testing::to_cpu(results[0][i])),
                                testing::to_f32(testing::to_cpu(results[1][i])), "second backward");
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, LayerNormCuda,
                         ::testing::Values(int64_t(7), int64_t(32), int64_t(37), int64_t(200), int64_t(320), int64_t(768),
                                           int64_t(1024), int64_t(1600), int64_t(4096), int64_t(4104)));

// CPU kernels are the fp32 reference: bf16 or f16 activations on the CPU are an error naming the dtype.
TEST(LayerNormDtype, LowPrecisionOnTheCpuIsRefused) {
  const int64_t N = 2, C = 8;
  for (const DType dtype : testing::kLowPrecisionDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = Tensor::zeros({N, C}, dtype), weight = Tensor::zeros({C}, dtype);
    Tensor out = Tensor::zeros({N, C}, dtype), residual = Tensor::zeros({N, C}, dtype);
    Tensor mean = Tensor::zeros({N}), rstd = Tensor::zeros({N}), dw = Tensor::zeros({C}), db = Tensor::zeros({C});
    std::string message = testing::error_of([&] { layernorm_forward(out, mean, rstd, x, weight, weight); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { residual_layernorm_forward(residual, out, mean, rstd, x, x, weight, weight); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
    message = testing::error_of([&] { layernorm_backward(out, dw, db, x, x, weight, mean, rstd); });
    EXPECT_TRUE(testing::names_dtype_on_cpu(message, dtype)) << message;
  }
}

}  // namespace
}  // namespace tessera
