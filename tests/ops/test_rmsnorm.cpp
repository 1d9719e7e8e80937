// RMSNorm: values and rstd against a double reference and against HF's LlamaRMSNorm formula,
// gradients by finite differences, the write/accumulate contract (and dx added to on request), one
// thread vs several, bad
// arguments; the fused residual + RMSNorm forward against the two ops in sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/op_testing.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"

namespace tessera {
namespace {

using testing::random_tensor;

struct RmsNormCase {
  int64_t B = 2, T = 3, C = 37;
  float eps = 1e-5f;
  Tensor x = random_tensor({B, T, C}, 31, -2.0f, 3.0f);
  Tensor weight = random_tensor({C}, 32, 0.5f, 1.5f);
  Tensor dout = random_tensor({B, T, C}, 33);
  Tensor out = Tensor::zeros({B, T, C});
  Tensor rstd = Tensor::zeros({B, T});

  double loss() {
    rmsnorm_forward(out, rstd, x, weight, eps);
    return testing::dot(out, dout);
  }
  void backward(Tensor& dx, Tensor& dweight, GradInto into = GradInto::write) {
    rmsnorm_backward(dx, dweight, dout, x, weight, rstd, into);
  }
};

// Rows at very different scales, so that eps matters for the small ones: row n is scaled by 10^-n.
Tensor multiscale_rows(int64_t N, int64_t C, uint64_t seed) {
  Tensor x = random_tensor({N, C}, seed, -2.0f, 2.0f);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) x.f32()[n * C + c] *= float(std::pow(10.0, -double(n)));
  return x;
}

TEST(RmsNorm, ForwardMatchesDoubleReference) {
  for (float eps : {1e-5f, 1e-6f}) {
    const int64_t N = 6, C = 37;
    Tensor x = multiscale_rows(N, C, 34), weight = random_tensor({C}, 35, 0.5f, 1.5f);
    Tensor out = Tensor::zeros({N, C}), rstd = Tensor::zeros({N});
    rmsnorm_forward(out, rstd, x, weight, eps);
    std::vector<double> out_ref, rstd_ref;
    for (int64_t n = 0; n < N; n++) {
      const float* x_n = x.f32() + n * C;
      double sum_sq = 0.0;
      for (int64_t c = 0; c < C; c++) sum_sq += double(x_n[c]) * double(x_n[c]);
      const double s = 1.0 / std::sqrt(sum_sq / double(C) + double(eps));
      rstd_ref.push_back(s);
      for (int64_t c = 0; c < C; c++) out_ref.push_back(double(x_n[c]) * s * double(weight.f32()[c]));
    }
    testing::expect_close(rstd, rstd_ref, 0.0, 1e-6, "rstd");
    testing::expect_close(out, out_ref, 1e-6, 1e-6, "out");
  }
}

// HF transformers' LlamaRMSNorm.forward, written out in fp32 as it runs for fp32 inputs:
//   variance = hidden_states.to(float32).pow(2).mean(-1, keepdim=True)
//   hidden_states = hidden_states * torch.rsqrt(variance + eps)
//   return weight * hidden_states.to(input_dtype)
// Only the order of the variance sum and rsqrt's rounding may differ from ours: a few ulp.
TEST(RmsNorm, ForwardMatchesHuggingFaceLlamaRmsNormFormula) {
  for (float eps : {1e-5f, 1e-6f}) {
    const int64_t N = 6, C = 64;
    Tensor x = multiscale_rows(N, C, 36), weight = random_tensor({C}, 37, 0.5f, 1.5f);
    Tensor out = Tensor::zeros({N, C}), rstd = Tensor::zeros({N});
    rmsnorm_forward(out, rstd, x, weight, eps);
    std::vector<double> hf;
    for (int64_t n = 0; n < N; n++) {
      const float* x_n = x.f32() + n * C;
      float variance = 0.0f;
      for (int64_t c = 0; c < C; c++) variance += x_n[c] * x_n[c];
      variance /= float(C);
      const float rsqrt = 1.0f / std::sqrt(variance + eps);
      for (int64_t c = 0; c < C; c++) hf.push_back(double(weight.f32()[c] * (x_n[c] * rsqrt)));
    }
    testing::expect_close(out, hf, 0.0, 1e-6, "out vs LlamaRMSNorm");
  }
}

TEST(RmsNorm, ZeroRowGivesZerosAndFiniteGradients) {
  const int64_t C = 8;
  const float eps = 1e-6f;
  Tensor x = Tensor::zeros({1, C}), weight = random_tensor({C}, 38), dout = random_tensor({1, C}, 39);
  Tensor out = Tensor::zeros({1, C}), rstd = Tensor::zeros({1});
  rmsnorm_forward(out, rstd, x, weight, eps);
  EXPECT_FLOAT_EQ(rstd.f32()[0], float(1.0 / std::sqrt(double(eps))));
  Tensor dx = Tensor::zeros({1, C}), dweight = Tensor::zeros({C});
  rmsnorm_backward(dx, dweight, dout, x, weight, rstd);
  for (int64_t c = 0; c < C; c++) {
    EXPECT_EQ(out.f32()[c], 0.0f);
    EXPECT_FLOAT_EQ(dx.f32()[c], dout.f32()[c] * weight.f32()[c] * rstd.f32()[0]);  // the linear part only
    EXPECT_EQ(dweight.f32()[c], 0.0f);
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  RmsNormCase r;
  auto loss = [&] { return r.loss(); };
  const std::vector<double> dx_fd = testing::numeric_gradient(r.x, loss, 1e-2f);
  const std::vector<double> dw_fd = testing::numeric_gradient(r.weight, loss, 1e-2f);
  r.loss();
  Tensor dx = Tensor::zeros({r.B, r.T, r.C}), dw = Tensor::zeros({r.C});
  r.backward(dx, dw);
  testing::expect_close(dx, dx_fd, 2e-3, 1e-2, "dx");
  testing::expect_close(dw, dw_fd, 2e-3, 1e-2, "dweight");
}

TEST(RmsNorm, BackwardWritesDxAndAccumulatesDweight) {
  RmsNormCase r;
  r.loss();
  Tensor dx = Tensor::zeros({r.B, r.T, r.C}), dw = Tensor::zeros({r.C});
  r.backward(dx, dw);
  const Tensor dx1 = testing::copy_of(dx), dw1 = testing::copy_of(dw);
  // dx over garbage: it must be written, never read.
  testing::fill(dx, testing::kNaN);
  // dweight onto existing values: it must add to them.
  const Tensor dw0 = random_tensor({r.C}, 40, -5.0f, 5.0f);
  Tensor dw2 = testing::copy_of(dw0);
  r.backward(dx, dw2);
  testing::expect_identical(dx, dx1, "dx");
  std::vector<double> expected;
  for (int64_t c = 0; c < r.C; c++) expected.push_back(double(dw0.f32()[c]) + double(dw1.f32()[c]));
  testing::expect_close(dw2, expected, 1e-5, 1e-5, "dweight");
}

// GradInto::add: dx ends as what it held plus the written gradient (one fp32 add, or an fma).
TEST(RmsNorm, BackwardAddsToDxWhenAsked) {
  RmsNormCase r;
  r.loss();
  Tensor dx = Tensor::zeros({r.B, r.T, r.C}), dw = Tensor::zeros({r.C});
  r.backward(dx, dw);
  const Tensor held = random_tensor({r.B, r.T, r.C}, 41);
  Tensor added = testing::copy_of(held);
  r.backward(added, dw, GradInto::add);
  for (int64_t i = 0; i < dx.numel(); i++) {
    const float h = held.f32()[i], d = dx.f32()[i];
    ASSERT_NEAR(added.f32()[i], h + d, 2e-7 * (std::fabs(h) + std::fabs(d))) << i;  // an fma may skip d's rounding
  }
}

TEST(RmsNorm, OneThreadAndSeveralAgree) {
  const int64_t N = 128, C = 300;  // above the parallel threshold; C not a multiple of 16
  Tensor x = random_tensor({N, C}, 41), weight = random_tensor({C}, 42), dout = random_tensor({N, C}, 43);
  Tensor b = random_tensor({N, C}, 44);
  Tensor out[2], rstd[2], dx[2], dw[2], fused_residual[2], fused_out[2], fused_rstd[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({N, C});
    rstd[run] = Tensor::zeros({N});
    dx[run] = Tensor::zeros({N, C});
    dw[run] = testing::copy_of(weight);  // accumulate onto non-zero values
    fused_residual[run] = Tensor::zeros({N, C});
    fused_out[run] = Tensor::zeros({N, C});
    fused_rstd[run] = Tensor::zeros({N});
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      rmsnorm_forward(out[run], rstd[run], x, weight, 1e-5f);
      rmsnorm_backward(dx[run], dw[run], dout, x, weight, rstd[run]);
      residual_rmsnorm_forward(fused_residual[run], fused_out[run], fused_rstd[run], x, b, weight, 1e-5f);
    });
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(rstd[0], rstd[1], "rstd");
  testing::expect_identical(dx[0], dx[1], "dx");
  testing::expect_identical(dw[0], dw[1], "dweight");
  testing::expect_identical(fused_residual[0], fused_residual[1], "residual_out");
  testing::expect_identical(fused_out[0], fused_out[1], "fused out");
  testing::expect_identical(fused_rstd[0], fused_rstd[1], "fused rstd");
}

// f throws an Error whose message reads "<op>: <argument> ...".
template <typename F>
void expect_error_naming(F&& f, const std::string& op, const std::string& argument) {
  const std::string message = testing::error_of(f);
  EXPECT_TRUE(testing::contains(message, op + ": " + argument + " "))
      << "message \"" << message << "\" does not name " << op << "'s " << argument;
}

TEST(RmsNorm, RejectsBadArguments) {
  RmsNormCase r;
  Tensor short_weight = Tensor::zeros({r.C - 1});
  expect_error_naming([&] { rmsnorm_forward(r.out, r.rstd, r.x, short_weight, r.eps); }, "rmsnorm_forward", "weight");
  Tensor short_rstd = Tensor::zeros({r.B});
  expect_error_naming([&] { rmsnorm_forward(r.out, short_rstd, r.x, r.weight, r.eps); }, "rmsnorm_forward", "rstd");
  Tensor wrong_out = Tensor::zeros({r.B * r.T, r.C + 1});
  expect_error_naming([&] { rmsnorm_forward(wrong_out, r.rstd, r.x, r.weight, r.eps); }, "rmsnorm_forward", "out");
  Tensor vector_x = Tensor::zeros({r.C});
  expect_error_naming([&] { rmsnorm_forward(r.out, r.rstd, vector_x, r.weight, r.eps); }, "rmsnorm_forward", "x");
  Tensor int_x = Tensor::zeros({r.B, r.T, r.C}, DType::i32);
  expect_error_naming([&] { rmsnorm_forward(r.out, r.rstd, int_x, r.weight, r.eps); }, "rmsnorm_forward", "x");
  for (float bad_eps : {0.0f, -1e-5f, testing::kNaN})
    expect_error_naming([&] { rmsnorm_forward(r.out, r.rstd, r.x, r.weight, bad_eps); }, "rmsnorm_forward", "eps");

  r.loss();
  Tensor dx = Tensor::zeros({r.B, r.T, r.C}), dw = Tensor::zeros({r.C});
  Tensor wrong_dw = Tensor::zeros({r.C + 1}), wrong_dx = Tensor::zeros({r.B, r.T, r.C - 1});
  Tensor wrong_dout = Tensor::zeros({r.B, r.C, r.T});
  expect_error_naming([&] { rmsnorm_backward(dx, wrong_dw, r.dout, r.x, r.weight, r.rstd); }, "rmsnorm_backward",
                      "dweight");
  expect_error_naming([&] { rmsnorm_backward(wrong_dx, dw, r.dout, r.x, r.weight, r.rstd); }, "rmsnorm_backward", "dx");
  expect_error_naming([&] { rmsnorm_backward(dx, dw, wrong_dout, r.x, r.weight, r.rstd); }, "rmsnorm_backward", "dout");
  expect_error_naming([&] { rmsnorm_backward(dx, dw, r.dout, r.x, r.weight, short_rstd); }, "rmsnorm_backward", "rstd");
  Tensor undefined;
  expect_error_naming([&] { rmsnorm_backward(dx, undefined, r.dout, r.x, r.weight, r.rstd); }, "rmsnorm_backward",
                      "dweight");
}

TEST(RmsNorm, ResidualRmsNormForwardIsResidualThenRmsNorm) {
  for (float eps : {1e-5f, 1e-6f}) {
    RmsNormCase r;
    const Tensor b = random_tensor({r.B, r.T, r.C}, 45);
    Tensor residual = Tensor::zeros({r.B, r.T, r.C});
    residual_forward(residual, r.x, b);
    rmsnorm_forward(r.out, r.rstd, residual, r.weight, eps);
    Tensor fused_residual = Tensor::zeros({r.B, r.T, r.C}), fused_out = Tensor::zeros({r.B, r.T, r.C});
    Tensor fused_rstd = Tensor::zeros({r.B, r.T});
    residual_rmsnorm_forward(fused_residual, fused_out, fused_rstd, r.x, b, r.weight, eps);
    testing::expect_identical(fused_residual, residual, "residual_out");
    testing::expect_identical(fused_out, r.out, "out");
    testing::expect_identical(fused_rstd, r.rstd, "rstd");
  }
  RmsNormCase r;
  Tensor residual = Tensor::zeros({r.B, r.T, r.C});
  Tensor short_b = Tensor::zeros({r.B, r.T, r.C - 1}), short_residual = Tensor::zeros({r.B, r.T, r.C - 1});
  expect_error_naming([&] { residual_rmsnorm_forward(residual, r.out, r.rstd, r.x, short_b, r.weight, r.eps); },
                      "residual_rmsnorm_forward", "b");
  expect_error_naming([&] { residual_rmsnorm_forward(short_residual, r.out, r.rstd, r.x, r.x, r.weight, r.eps); },
                      "residual_rmsnorm_forward", "residual_out");
  expect_error_naming([&] { residual_rmsnorm_forward(residual, r.out, r.rstd, r.x, r.x, r.weight, -1.0f); },
                      "residual_rmsnorm_forward", "eps");
}

}  // namespace
}  // namespace tessera
