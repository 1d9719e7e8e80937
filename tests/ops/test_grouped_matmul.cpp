// Grouped GEMM: values against a double reference and against matmul_forward on each group, with
// empty groups and rows past offsets[E] left alone; gradients by finite differences; dx written,
// dweight accumulated (empty groups' slices untouched), dx optional; one thread vs several (to
// rounding: OpenBLAS's blocking follows the thread count); bad arguments.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/grouped_matmul.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::expect_error_with;
using testing::random_tensor;

Tensor offsets_of(const std::vector<int32_t>& values) {
  Tensor t = Tensor::zeros({int64_t(values.size())}, DType::i32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// E = 5 experts over 14 rows: groups of 3, 0, 4, 0 and 5 rows, rows 12 and 13 belong to none.
struct GroupedCase {
  int64_t E = 5, C = 11, OC = 7, M_rows = 14;
  std::vector<int32_t> bounds = {0, 3, 3, 7, 7, 12};
  Tensor offsets = offsets_of(bounds);
  Tensor x = random_tensor({M_rows, C}, 501);
  Tensor weight = random_tensor({E, OC, C}, 502);
  Tensor dout = random_tensor({M_rows, OC}, 503);

  int64_t expert_of(int64_t row) const {
    for (int64_t e = 0; e < E; e++)
      if (row >= bounds[size_t(e)] && row < bounds[size_t(e + 1)]) return e;
    return -1;
  }
  // out rows < offsets[E] in double.
  std::vector<double> reference() const {
    std::vector<double> ref;
    for (int64_t i = 0; i < bounds.back(); i++)
      for (int64_t o = 0; o < OC; o++) {
        double s = 0.0;
        for (int64_t c = 0; c < C; c++) s += double(x.f32()[i * C + c]) * weight.f32()[(expert_of(i) * OC + o) * C + c];
        ref.push_back(s);
      }
    return ref;
  }
};

TEST(GroupedMatmul, ForwardMatchesDoubleReferenceAndLeavesRowsPastTheGroups) {
  GroupedCase g;
  Tensor out = Tensor::zeros({g.M_rows, g.OC});
  testing::fill(out, 7.0f);
  grouped_matmul_forward(out, g.x, g.weight, g.offsets);
  testing::expect_close(out.f32(), g.reference(), 1e-5, 1e-5, "out");
  for (int64_t i = g.bounds.back() * g.OC; i < g.M_rows * g.OC; i++) ASSERT_EQ(out.f32()[i], 7.0f) << i;
}

TEST(GroupedMatmul, EachGroupEqualsADenseMatmul) {
  GroupedCase g;
  Tensor out = Tensor::zeros({g.M_rows, g.OC}), dx = Tensor::zeros({g.M_rows, g.C});
  Tensor dweight = Tensor::zeros({g.E, g.OC, g.C});
  grouped_matmul_forward(out, g.x, g.weight, g.offsets);
  grouped_matmul_backward(dx, dweight, g.dout, g.x, g.weight, g.offsets);
  for (int64_t e = 0; e < g.E; e++) {
    const int64_t begin = g.bounds[size_t(e)], rows = g.bounds[size_t(e + 1)] - begin;
    SCOPED_TRACE(::testing::Message() << "expert " << e << ", " << rows << " rows");
    const Tensor w_e = g.weight.view(e * g.OC * g.C, {g.OC, g.C});
    Tensor dw_ref = Tensor::zeros({g.OC, g.C}), db;
    if (rows > 0) {
      Tensor out_ref = Tensor::zeros({rows, g.OC}), dx_ref = Tensor::zeros({rows, g.C});
      const Tensor x_e = g.x.view(begin * g.C, {rows, g.C}), dout_e = g.dout.view(begin * g.OC, {rows, g.OC});
      matmul_forward(out_ref, x_e, w_e, Tensor());
      matmul_backward(dx_ref, dw_ref, db, dout_e, x_e, w_e);
      const auto as_double = [](const Tensor& t) { return std::vector<double>(t.f32(), t.f32() + t.numel()); };
      testing::expect_close(out.view(begin * g.OC, {rows, g.OC}), as_double(out_ref), 1e-6, 1e-6, "out");
      testing::expect_close(dx.view(begin * g.C, {rows, g.C}), as_double(dx_ref), 1e-6, 1e-6, "dx");
    }
    testing::expect_identical(dweight.view(e * g.OC * g.C, {g.OC, g.C}), dw_ref, "dweight");  // 0 when empty
  }
}

TEST(GroupedMatmul, BackwardMatchesFiniteDifferences) {
  GroupedCase g;
  Tensor out = Tensor::zeros({g.M_rows, g.OC});
  const int64_t M = g.bounds.back();
  auto loss = [&] {
    grouped_matmul_forward(out, g.x, g.weight, g.offsets);
    return testing::dot(out.view(0, {M, g.OC}), g.dout.view(0, {M, g.OC}));
  };
  const std::vector<double> dx_fd = testing::numeric_gradient(g.x, loss, 1e-2f);
  const std::vector<double> dw_fd = testing::numeric_gradient(g.weight, loss, 1e-2f);
  Tensor dx = Tensor::zeros({g.M_rows, g.C}), dweight = Tensor::zeros({g.E, g.OC, g.C});
  grouped_matmul_backward(dx, dweight, g.dout, g.x, g.weight, g.offsets);
  testing::expect_close(dx, dx_fd, 1e-3, 1e-3, "dx");  // rows past M: 0 either way
  testing::expect_close(dweight, dw_fd, 1e-3, 1e-3, "dweight");
}

TEST(GroupedMatmul, BackwardWritesDxAndAccumulatesDweight) {
  GroupedCase g;
  const int64_t M = g.bounds.back();
  Tensor dx = Tensor::zeros({g.M_rows, g.C}), dweight = Tensor::zeros({g.E, g.OC, g.C});
  grouped_matmul_backward(dx, dweight, g.dout, g.x, g.weight, g.offsets);
  const Tensor dx1 = testing::copy_of(dx), dw1 = testing::copy_of(dweight);

  Tensor dx2 = Tensor::zeros({g.M_rows, g.C});
  testing::fill(dx2, testing::kNaN);                                       // rows < M written, never read
  for (int64_t i = M * g.C; i < g.M_rows * g.C; i++) dx2.f32()[i] = 7.0f;  // rows past M untouched
  const Tensor prior = random_tensor({g.E, g.OC, g.C}, 504);
  Tensor dw2 = testing::copy_of(prior);
  grouped_matmul_backward(dx2, dw2, g.dout, g.x, g.weight, g.offsets);
  testing::expect_identical(dx2.view(0, {M, g.C}), dx1.view(0, {M, g.C}), "dx");
  for (int64_t i = M * g.C; i < g.M_rows * g.C; i++) ASSERT_EQ(dx2.f32()[i], 7.0f) << i;
  std::vector<double> sum;
  for (int64_t i = 0; i < prior.numel(); i++) sum.push_back(double(prior.f32()[i]) + dw1.f32()[i]);
  testing::expect_close(dw2, sum, 1e-6, 1e-6, "dweight += ");
  for (const int64_t empty : {1, 3})  // experts without rows: their slice is left exactly as it was
    testing::expect_identical(dw2.view(empty * g.OC * g.C, {g.OC, g.C}), prior.view(empty * g.OC * g.C, {g.OC, g.C}),
                              "empty expert's dweight");

  Tensor no_dx, dw3 = Tensor::zeros({g.E, g.OC, g.C});
  grouped_matmul_backward(no_dx, dw3, g.dout, g.x, g.weight, g.offsets);
  testing::expect_identical(dw3, dw1, "dweight without dx");
}

TEST(GroupedMatmul, AllRowsInOneGroupOrNone) {
  GroupedCase g;
  Tensor out = Tensor::zeros({g.M_rows, g.OC}), dense = Tensor::zeros({g.M_rows, g.OC});
  grouped_matmul_forward(out, g.x, g.weight,
                         offsets_of({0, 0, 0, int32_t(g.M_rows), int32_t(g.M_rows), int32_t(g.M_rows)}));
  matmul_forward(dense, g.x, g.weight.view(2 * g.OC * g.C, {g.OC, g.C}), Tensor());
  testing::expect_close(out, std::vector<double>(dense.f32(), dense.f32() + dense.numel()), 1e-6, 1e-6, "one group");
  testing::fill(out, 7.0f);
  Tensor dweight = Tensor::zeros({g.E, g.OC, g.C}), dx = Tensor::zeros({g.M_rows, g.C});
  const Tensor none = offsets_of({0, 0, 0, 0, 0, 0});
  grouped_matmul_forward(out, g.x, g.weight, none);
  grouped_matmul_backward(dx, dweight, g.dout, g.x, g.weight, none);
  for (int64_t i = 0; i < out.numel(); i++) ASSERT_EQ(out.f32()[i], 7.0f);
  for (int64_t i = 0; i < dweight.numel(); i++) ASSERT_EQ(dweight.f32()[i], 0.0f);
}

TEST(GroupedMatmul, OneThreadAndSeveralAgree) {
  const int64_t E = 4, C = 96, OC = 80, M_rows = 400;
  const Tensor offsets = offsets_of({0, 150, 151, 151, 390});
  const Tensor x = random_tensor({M_rows, C}, 505), weight = random_tensor({E, OC, C}, 506);
  const Tensor dout = random_tensor({M_rows, OC}, 507);
  Tensor out[2], dx[2], dw[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({M_rows, OC});
    dx[run] = Tensor::zeros({M_rows, C});
    dw[run] = Tensor::zeros({E, OC, C});
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      grouped_matmul_forward(out[run], x, weight, offsets);
      grouped_matmul_backward(dx[run], dw[run], dout, x, weight, offsets);
    });
  }
  // OpenBLAS blocks a GEMM differently on one thread and on several, so (as for matmul) the
  // results agree to rounding, not bit for bit; on a fixed thread count they are reproducible.
  const auto as_double = [](const Tensor& t) { return std::vector<double>(t.f32(), t.f32() + t.numel()); };
  testing::expect_close(out[1], as_double(out[0]), 1e-5, 1e-5, "out");
  testing::expect_close(dx[1], as_double(dx[0]), 1e-5, 1e-5, "dx");
  testing::expect_close(dw[1], as_double(dw[0]), 1e-5, 1e-5, "dweight");
}

TEST(GroupedMatmul, RejectsBadArguments) {
  GroupedCase g;
  const char* fwd = "grouped_matmul_forward: ";
  const char* bwd = "grouped_matmul_backward: ";
  Tensor out = Tensor::zeros({g.M_rows, g.OC});
  expect_error_with(
      [&] {
        grouped_matmul_forward(out, g.x, g.weight, offsets_of({0, 3, 3, 7, 7}));
      },
      {fwd, "offsets has shape (5)"});
  expect_error_with(
      [&] {
        grouped_matmul_forward(out, g.x, g.weight, offsets_of({1, 3, 3, 7, 7, 12}));
      },
      {fwd, "offsets[0] = 1"});
  expect_error_with(
      [&] {
        grouped_matmul_forward(out, g.x, g.weight, offsets_of({0, 3, 2, 7, 7, 12}));
      },
      {fwd, "offsets[2] = 2 is below offsets[1] = 3"});
  expect_error_with(
      [&] {
        grouped_matmul_forward(out, g.x, g.weight, offsets_of({0, 3, 3, 7, 7, 15}));
      },
      {fwd, "offsets[E] = 15 is past the 14 rows"});
  const Tensor f32_offsets = Tensor::zeros({g.E + 1});
  expect_error_with([&] { grouped_matmul_forward(out, g.x, g.weight, f32_offsets); }, {fwd, "offsets must be i32"});
  expect_error_with([&] { grouped_matmul_forward(out, g.x, g.weight, Tensor()); }, {fwd, "offsets is undefined"});
  const Tensor wrong_weight = Tensor::zeros({g.E, g.OC, g.C + 1}), flat_weight = Tensor::zeros({g.OC, g.C});
  expect_error_with([&] { grouped_matmul_forward(out, g.x, wrong_weight, g.offsets); },
                    {fwd, "weight must be (E,OC,11)"});
  expect_error_with([&] { grouped_matmul_forward(out, g.x, flat_weight, g.offsets); },
                    {fwd, "weight must be (E,OC,11)"});
  Tensor wrong_out = Tensor::zeros({g.M_rows, g.OC + 1});
  expect_error_with([&] { grouped_matmul_forward(wrong_out, g.x, g.weight, g.offsets); }, {fwd, "out has shape"});
  const Tensor bf16_x = Tensor::zeros({g.M_rows, g.C}, DType::bf16);
  expect_error_with([&] { grouped_matmul_forward(out, bf16_x, g.weight, g.offsets); }, {fwd, "x is bf16 on the CPU"});

  Tensor dx = Tensor::zeros({g.M_rows, g.C}), dweight = Tensor::zeros({g.E, g.OC, g.C});
  Tensor wrong_dw = Tensor::zeros({g.E - 1, g.OC, g.C}), wrong_dx = Tensor::zeros({g.M_rows + 1, g.C});
  Tensor wrong_dout = Tensor::zeros({g.M_rows, g.OC - 1}), undefined;
  expect_error_with([&] { grouped_matmul_backward(dx, wrong_dw, g.dout, g.x, g.weight, g.offsets); },
                    {bwd, "dweight has shape"});
  expect_error_with([&] { grouped_matmul_backward(wrong_dx, dweight, g.dout, g.x, g.weight, g.offsets); },
                    {bwd, "dx has shape"});
  expect_error_with([&] { grouped_matmul_backward(dx, dweight, wrong_dout, g.x, g.weight, g.offsets); },
                    {bwd, "dout has shape"});
  expect_error_with([&] { grouped_matmul_backward(dx, dweight, g.dout, undefined, g.weight, g.offsets); },
                    {bwd, "x is undefined"});
}

// Zero-bubble's split: the input gradient alone, then the weight gradient alone, give the whole
// backward's values bit for bit (the same GEMMs).
TEST(GroupedMatmul, SplitBackwardEqualsTheWhole) {
  GroupedCase g;
  Tensor dx = Tensor::zeros({g.M_rows, g.C}), dweight = Tensor::zeros({g.E, g.OC, g.C});
  grouped_matmul_backward(dx, dweight, g.dout, g.x, g.weight, g.offsets);
  Tensor split_dx = Tensor::zeros({g.M_rows, g.C}), split_dweight = Tensor::zeros({g.E, g.OC, g.C}), none;
  grouped_matmul_backward(split_dx, none, g.dout, g.x, g.weight, g.offsets);
  testing::expect_identical(split_dx, dx, "dx");
  EXPECT_EQ(squared_norm(split_dweight), 0.0);  // untouched by the input part
  grouped_matmul_backward(none, split_dweight, g.dout, g.x, g.weight, g.offsets);
  testing::expect_identical(split_dweight, dweight, "dweight");
}

}  // namespace
}  // namespace tessera
