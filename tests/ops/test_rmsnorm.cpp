// RMSNorm: values and rstd against a double reference and against HF's LlamaRMSNorm formula,
// gradients by finite differences, the write/accumulate contract (and dx added to on request), one
// thread vs several, bad arguments; the fused residual + RMSNorm forward against the two ops in
// sequence; rows split over a group (their statistics summed from the parts, a part held twice) against
// whole rows.
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

// Columns [begin, begin + width) of every row of x (N, C), as a tensor of their own.
Tensor columns_of(const Tensor& x, int64_t begin, int64_t width) {
  const int64_t C = x.size(-1), N = x.numel() / C;
  Tensor part = Tensor::zeros({N, width});
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < width; c++) part.f32()[n * width + c] = x.f32()[n * C + begin + c];
  return part;
}

// Rows split over a group, as tensor parallelism splits OLMo 2's query heads: each of the parts
// (13, 13 and 11 of 37 channels) sums its share of the statistics, the shares are added as the group
// would, and each part's out, rstd, dx and dweight are the whole row's.
TEST(RmsNorm, GroupedRowsMatchWholeRows) {
  RmsNormCase r;
  const int64_t N = r.B * r.T, C = r.C;
  r.loss();
  Tensor dx = Tensor::zeros({r.B, r.T, C}), dw = Tensor::zeros({C});
  r.backward(dx, dw);
  const Tensor x = r.x.reshape({N, C}), dout = r.dout.reshape({N, C});
  const std::vector<std::pair<int64_t, int64_t>> parts = {{0, 13}, {13, 13}, {26, 11}};
  Tensor sums = Tensor::zeros({N}), dots = Tensor::zeros({N});
  for (const auto& [begin, width] : parts) {
    Tensor share = Tensor::zeros({N});
    rmsnorm_partial_sums(share, columns_of(x, begin, width));
    for (int64_t n = 0; n < N; n++) sums.f32()[n] += share.f32()[n];
  }
  std::vector<Tensor> rstds;
  for (const auto& [begin, width] : parts) {
    Tensor out = Tensor::zeros({N, width}), rstd = Tensor::zeros({N});
    const Tensor weight = columns_of(r.weight.reshape({1, C}), begin, width).reshape({width});
    rmsnorm_grouped_forward(out, rstd, columns_of(x, begin, width), weight, sums, C, r.eps);
    testing::expect_close(rstd, std::vector<double>(r.rstd.f32(), r.rstd.f32() + N), 0.0, 1e-6, "grouped rstd");
    const Tensor whole_out = columns_of(r.out.reshape({N, C}), begin, width);
    testing::expect_close(out, std::vector<double>(whole_out.f32(), whole_out.f32() + N * width), 1e-6, 1e-6,
                          "grouped out");
    Tensor share = Tensor::zeros({N});
    rmsnorm_partial_dots(share, columns_of(dout, begin, width), columns_of(x, begin, width), weight, rstd);
    for (int64_t n = 0; n < N; n++) dots.f32()[n] += share.f32()[n];
    rstds.push_back(rstd);
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    const auto [begin, width] = parts[p];
    const Tensor weight = columns_of(r.weight.reshape({1, C}), begin, width).reshape({width});
    Tensor part_dx = Tensor::zeros({N, width}), part_dw = Tensor::zeros({width});
    rmsnorm_grouped_backward(part_dx, part_dw, columns_of(dout, begin, width), columns_of(x, begin, width), weight,
                             rstds[p], dots, C);
    const Tensor want_dx = columns_of(dx, begin, width), want_dw = columns_of(dw.reshape({1, C}), begin, width);
    testing::expect_close(part_dx, std::vector<double>(want_dx.f32(), want_dx.f32() + N * width), 1e-6, 1e-5,
                          "grouped dx");
    testing::expect_close(part_dw, std::vector<double>(want_dw.f32(), want_dw.f32() + width), 1e-6, 1e-5,
                          "grouped dweight");
  }
}

// A part held by two ranks (a kv head replicated under tp4 of 2 kv heads): the group's sums count it
// twice and so does the width; each replica's dout is a share of the whole, and the replicas' dx add
// up to the whole row's.
TEST(RmsNorm, GroupedRowsCountReplicatedPartsTwice) {
  const int64_t N = 5, C = 12, half = 6;
  const Tensor x = random_tensor({N, C}, 50, -2.0f, 2.0f), weight = random_tensor({C}, 51, 0.5f, 1.5f);
  const Tensor dout = random_tensor({N, C}, 52), dout_share = random_tensor({N, C}, 53);
  Tensor out = Tensor::zeros({N, C}), rstd = Tensor::zeros({N}), dx = Tensor::zeros({N, C}), dw = Tensor::zeros({C});
  rmsnorm_forward(out, rstd, x, weight, 1e-6f);
  rmsnorm_backward(dx, dw, dout, x, weight, rstd);
  // Ranks 0, 1 hold columns [0, 6), ranks 2, 3 columns [6, 12); rank 2r takes dout_share of the
  // gradient, rank 2r + 1 the rest.
  Tensor sums = Tensor::zeros({N}), dots = Tensor::zeros({N});
  struct Rank {
    int64_t begin;
    Tensor dout, weight, rstd;
  };
  std::vector<Rank> ranks;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const int64_t begin = rank / 2 * half;
    Tensor d = columns_of(rank % 2 == 0 ? dout_share : dout, begin, half);
    if (rank % 2 == 1) {  // the rest: dout - dout_share
      const Tensor first = columns_of(dout_share, begin, half);
      for (int64_t i = 0; i < d.numel(); ++i) d.f32()[i] -= first.f32()[i];
    }
    ranks.push_back({begin, d, columns_of(weight.reshape({1, C}), begin, half).reshape({half}), Tensor::zeros({N})});
    Tensor share = Tensor::zeros({N});
    rmsnorm_partial_sums(share, columns_of(x, begin, half));
    for (int64_t n = 0; n < N; n++) sums.f32()[n] += share.f32()[n];
  }
  for (Rank& rank : ranks) {
    Tensor part_out = Tensor::zeros({N, half});
    rmsnorm_grouped_forward(part_out, rank.rstd, columns_of(x, rank.begin, half), rank.weight, sums, 4 * half, 1e-6f);
    testing::expect_close(rank.rstd, std::vector<double>(rstd.f32(), rstd.f32() + N), 0.0, 1e-6, "replicated rstd");
    Tensor share = Tensor::zeros({N});
    rmsnorm_partial_dots(share, rank.dout, columns_of(x, rank.begin, half), rank.weight, rank.rstd);
    for (int64_t n = 0; n < N; n++) dots.f32()[n] += share.f32()[n];
  }
  for (int64_t pair = 0; pair < 2; ++pair) {
    Tensor summed_dx = Tensor::zeros({N, half}), summed_dw = Tensor::zeros({half});
    for (int64_t replica = 0; replica < 2; ++replica) {
      const Rank& rank = ranks[size_t(2 * pair + replica)];
      Tensor part_dx = Tensor::zeros({N, half});
      rmsnorm_grouped_backward(part_dx, summed_dw, rank.dout, columns_of(x, rank.begin, half), rank.weight, rank.rstd,
                               dots, 4 * half);
      for (int64_t i = 0; i < part_dx.numel(); ++i) summed_dx.f32()[i] += part_dx.f32()[i];
    }
    const Tensor want_dx = columns_of(dx, pair * half, half);
    const Tensor want_dw = columns_of(dw.reshape({1, C}), pair * half, half);
    testing::expect_close(summed_dx, std::vector<double>(want_dx.f32(), want_dx.f32() + N * half), 1e-6, 1e-5,
                          "replicas' dx");
    testing::expect_close(summed_dw, std::vector<double>(want_dw.f32(), want_dw.f32() + half), 1e-6, 1e-5,
                          "replicas' dweight");
  }
}

TEST(RmsNorm, GroupedRejectsBadStatistics) {
  RmsNormCase r;
  Tensor short_sums = Tensor::zeros({r.B * r.T - 1}), sums = Tensor::zeros({r.B * r.T});
  testing::fill(sums, 1.0f);
  expect_error_naming([&] { rmsnorm_grouped_forward(r.out, r.rstd, r.x, r.weight, short_sums, 2 * r.C, r.eps); },
                      "rmsnorm_grouped_forward", "sums");
  expect_error_naming([&] { rmsnorm_grouped_forward(r.out, r.rstd, r.x, r.weight, sums, r.C - 1, r.eps); },
                      "rmsnorm_grouped_forward", "a row's width");
  Tensor dx = Tensor::zeros({r.B, r.T, r.C}), dw = Tensor::zeros({r.C});
  expect_error_naming(
      [&] { rmsnorm_grouped_backward(dx, dw, r.dout, r.x, r.weight, r.rstd, short_sums, 2 * r.C); },
      "rmsnorm_grouped_backward", "dots");
  expect_error_naming([&] { rmsnorm_partial_sums(short_sums, r.x); }, "rmsnorm_partial_sums", "sums");
}

}  // namespace
}  // namespace tessera
