// LayerNorm: values and statistics against a double reference, gradients by finite differences,
// the write/accumulate contract (and dx added to on request), bad shapes; the fused residual + LayerNorm forward against the two
// ops in sequence; without a bias (Cohere's), the same as a zero bias.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/layernorm.h"
#include "ops/op_testing.h"
#include "ops/residual.h"

namespace tessera {
namespace {

using testing::random_tensor;

struct LayerNormCase {
  int64_t B = 2, T = 3, C = 37;
  Tensor x = random_tensor({B, T, C}, 11, -2.0f, 3.0f);
  Tensor weight = random_tensor({C}, 12, 0.5f, 1.5f);
  Tensor bias = random_tensor({C}, 13);
  Tensor dout = random_tensor({B, T, C}, 14);
  Tensor out = Tensor::zeros({B, T, C});
  Tensor mean = Tensor::zeros({B, T});
  Tensor rstd = Tensor::zeros({B, T});

  double loss() {
    layernorm_forward(out, mean, rstd, x, weight, bias);
    return testing::dot(out, dout);
  }
};

TEST(LayerNorm, ForwardMatchesDoubleReference) {
  LayerNormCase l;
  layernorm_forward(l.out, l.mean, l.rstd, l.x, l.weight, l.bias);
  for (int64_t n = 0; n < l.B * l.T; n++) {
    const float* x = l.x.f32() + n * l.C;
    double m = 0.0, var = 0.0;
    for (int64_t c = 0; c < l.C; c++) m += x[c];
    m /= double(l.C);
    for (int64_t c = 0; c < l.C; c++) var += (x[c] - m) * (x[c] - m);
    const double s = 1.0 / std::sqrt(var / double(l.C) + 1e-5);
    EXPECT_NEAR(l.mean.f32()[n], m, 1e-5);
    EXPECT_NEAR(l.rstd.f32()[n], s, 1e-5 * s);
    for (int64_t c = 0; c < l.C; c++)
      EXPECT_NEAR(l.out.f32()[n * l.C + c], (x[c] - m) * s * l.weight.f32()[c] + l.bias.f32()[c], 1e-5);
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  LayerNormCase l;
  auto loss = [&] { return l.loss(); };
  const std::vector<double> dx_fd = testing::numeric_gradient(l.x, loss, 1e-2f);
  const std::vector<double> dw_fd = testing::numeric_gradient(l.weight, loss, 1e-2f);
  const std::vector<double> db_fd = testing::numeric_gradient(l.bias, loss, 1e-2f);
  l.loss();
  Tensor dx = Tensor::zeros({l.B, l.T, l.C}), dw = Tensor::zeros({l.C}), db = Tensor::zeros({l.C});
  layernorm_backward(dx, dw, db, l.dout, l.x, l.weight, l.mean, l.rstd);
  testing::expect_close(dx, dx_fd, 2e-3, 1e-2, "dx");
  testing::expect_close(dw, dw_fd, 2e-3, 1e-2, "dweight");
  testing::expect_close(db, db_fd, 2e-3, 1e-2, "dbias");
}

TEST(LayerNorm, BackwardWritesDxAndAccumulatesParameterGradients) {
  LayerNormCase l;
  l.loss();
  Tensor dx = Tensor::zeros({l.B, l.T, l.C}), dw = Tensor::zeros({l.C}), db = Tensor::zeros({l.C});
  layernorm_backward(dx, dw, db, l.dout, l.x, l.weight, l.mean, l.rstd);
  const Tensor dx1 = testing::copy_of(dx), dw1 = testing::copy_of(dw), db1 = testing::copy_of(db);
  testing::fill(dx, testing::kNaN);  // a written gradient must not read what was there
  layernorm_backward(dx, dw, db, l.dout, l.x, l.weight, l.mean, l.rstd);
  for (int64_t i = 0; i < dx.numel(); i++) EXPECT_EQ(dx.f32()[i], dx1.f32()[i]);
  // The second call adds row by row onto the first's sums, so its roundings differ from doubling them:
  // within 1e-5 of twice (a written gradient would be half of it).
  for (int64_t c = 0; c < l.C; c++) {
    EXPECT_NEAR(dw.f32()[c], 2.0f * dw1.f32()[c], 1e-5 * std::fabs(dw1.f32()[c]) + 1e-7);
    EXPECT_NEAR(db.f32()[c], 2.0f * db1.f32()[c], 1e-5 * std::fabs(db1.f32()[c]) + 1e-7);
  }
}

// GradInto::add: dx ends as what it held plus the written gradient (one fp32 add, or an fma).
TEST(LayerNorm, BackwardAddsToDxWhenAsked) {
  LayerNormCase l;
  l.loss();
  Tensor dx = Tensor::zeros({l.B, l.T, l.C}), dw = Tensor::zeros({l.C}), db = Tensor::zeros({l.C});
  layernorm_backward(dx, dw, db, l.dout, l.x, l.weight, l.mean, l.rstd);
  const Tensor held = random_tensor({l.B, l.T, l.C}, 15);
  Tensor added = testing::copy_of(held);
  layernorm_backward(added, dw, db, l.dout, l.x, l.weight, l.mean, l.rstd, GradInto::add);
  for (int64_t i = 0; i < dx.numel(); i++) {
    const float h = held.f32()[i], d = dx.f32()[i];
    ASSERT_NEAR(added.f32()[i], h + d, 2e-7 * (std::fabs(h) + std::fabs(d))) << i;  // an fma may skip d's rounding
  }
}

TEST(LayerNorm, OneThreadAndSeveralAgree) {
  const int64_t N = 128, C = 300;  // above the parallel threshold; C not a multiple of 16
  Tensor x = random_tensor({N, C}, 15), weight = random_tensor({C}, 16), bias = random_tensor({C}, 17);
  Tensor dout = random_tensor({N, C}, 18);
  Tensor out[2], dx[2], dw[2], db[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({N, C});
    dx[run] = Tensor::zeros({N, C});
    dw[run] = Tensor::zeros({C});
    db[run] = Tensor::zeros({C});
    Tensor mean = Tensor::zeros({N}), rstd = Tensor::zeros({N});
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      layernorm_forward(out[run], mean, rstd, x, weight, bias);
      layernorm_backward(dx[run], dw[run], db[run], dout, x, weight, mean, rstd);
    });
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(dx[0], dx[1], "dx");
  testing::expect_identical(dw[0], dw[1], "dweight");
  testing::expect_identical(db[0], db[1], "dbias");
}

TEST(LayerNorm, RejectsBadShapes) {
  LayerNormCase l;
  Tensor short_weight = Tensor::zeros({l.C - 1});
  EXPECT_THROW(layernorm_forward(l.out, l.mean, l.rstd, l.x, short_weight, l.bias), Error);
  Tensor short_mean = Tensor::zeros({l.B});
  EXPECT_THROW(layernorm_forward(l.out, short_mean, l.rstd, l.x, l.weight, l.bias), Error);
  Tensor wrong_out = Tensor::zeros({l.B * l.T, l.C + 1});
  EXPECT_THROW(layernorm_forward(wrong_out, l.mean, l.rstd, l.x, l.weight, l.bias), Error);
  Tensor dx = Tensor::zeros({l.B, l.T, l.C}), dw = Tensor::zeros({l.C}), wrong_db = Tensor::zeros({l.C + 1});
  EXPECT_THROW(layernorm_backward(dx, dw, wrong_db, l.dout, l.x, l.weight, l.mean, l.rstd), Error);
  Tensor int_x = Tensor::zeros({l.B, l.T, l.C}, DType::i32);
  EXPECT_THROW(layernorm_forward(l.out, l.mean, l.rstd, int_x, l.weight, l.bias), Error);
}

TEST(LayerNorm, ResidualLayerNormForwardIsResidualThenLayerNorm) {
  LayerNormCase l;
  const Tensor b = random_tensor({l.B, l.T, l.C}, 19);
  Tensor residual = Tensor::zeros({l.B, l.T, l.C});
  residual_forward(residual, l.x, b);
  layernorm_forward(l.out, l.mean, l.rstd, residual, l.weight, l.bias);
  Tensor fused_residual = Tensor::zeros({l.B, l.T, l.C}), fused_out = Tensor::zeros({l.B, l.T, l.C});
  Tensor fused_mean = Tensor::zeros({l.B, l.T}), fused_rstd = Tensor::zeros({l.B, l.T});
  residual_layernorm_forward(fused_residual, fused_out, fused_mean, fused_rstd, l.x, b, l.weight, l.bias);
  testing::expect_identical(fused_residual, residual, "residual_out");
  testing::expect_identical(fused_out, l.out, "out");
  testing::expect_identical(fused_mean, l.mean, "mean");
  testing::expect_identical(fused_rstd, l.rstd, "rstd");
  Tensor short_b = Tensor::zeros({l.B, l.T, l.C - 1});
  EXPECT_THROW(residual_layernorm_forward(fused_residual, fused_out, fused_mean, fused_rstd, l.x, short_b, l.weight,
                                          l.bias),
               Error);
}

// No bias (undefined bias and dbias): forward, fused forward and backward give a zero bias's values bit for bit.
TEST(LayerNorm, WithoutABiasIsAZeroBias) {
  LayerNormCase l;
  const Tensor zero = Tensor::zeros({l.C});
  Tensor none;
  layernorm_forward(l.out, l.mean, l.rstd, l.x, l.weight, zero);
  Tensor out = Tensor::zeros(l.out.shape()), mean = Tensor::zeros(l.mean.shape()), rstd = Tensor::zeros(l.rstd.shape());
  layernorm_forward(out, mean, rstd, l.x, l.weight, none);
  testing::expect_identical(out, l.out, "out");
  Tensor sum = Tensor::zeros(l.x.shape()), fused = Tensor::zeros(l.out.shape());
  residual_layernorm_forward(sum, fused, mean, rstd, l.x, l.dout, l.weight, none);
  Tensor sum_zero = Tensor::zeros(l.x.shape()), fused_zero = Tensor::zeros(l.out.shape());
  residual_layernorm_forward(sum_zero, fused_zero, mean, rstd, l.x, l.dout, l.weight, zero);
  testing::expect_identical(fused, fused_zero, "fused out");
  layernorm_forward(out, mean, rstd, l.x, l.weight, none);
  Tensor dx = Tensor::zeros(l.x.shape()), dweight = Tensor::zeros({l.C}), dbias = Tensor::zeros({l.C});
  layernorm_backward(dx, dweight, dbias, l.dout, l.x, l.weight, mean, rstd);
  Tensor dx_none = Tensor::zeros(l.x.shape()), dweight_none = Tensor::zeros({l.C});
  layernorm_backward(dx_none, dweight_none, none, l.dout, l.x, l.weight, mean, rstd);
  testing::expect_identical(dx_none, dx, "dx");
  testing::expect_identical(dweight_none, dweight, "dweight");
}

}  // namespace
}  // namespace tessera
