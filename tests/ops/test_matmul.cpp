// Linear layer: values against a double reference (with and without bias, (B,T,C) input),
// gradients by finite differences, the write/accumulate contract, optional dx/dbias, bad shapes;
// the fused GELU ops bit for bit against their compositions, and their bad arguments; the tuning
// setting's range and the experts' row buckets.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <set>
#include <utility>
#include <vector>

#include "ops/gelu.h"
#include "ops/matmul.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::random_tensor;

struct MatmulCase {
  int64_t B = 2, T = 3, C = 19, OC = 11;
  Tensor x = random_tensor({B, T, C}, 21);
  Tensor weight = random_tensor({OC, C}, 22);
  Tensor bias = random_tensor({OC}, 23);
  Tensor dout = random_tensor({B, T, OC}, 24);
  Tensor out = Tensor::zeros({B, T, OC});

  std::vector<double> reference(bool with_bias) const {
    std::vector<double> ref(size_t(B * T * OC));
    for (int64_t n = 0; n < B * T; n++)
      for (int64_t o = 0; o < OC; o++) {
        double s = with_bias ? bias.f32()[o] : 0.0;
        for (int64_t c = 0; c < C; c++) s += double(x.f32()[n * C + c]) * weight.f32()[o * C + c];
        ref[size_t(n * OC + o)] = s;
      }
    return ref;
  }
};

TEST(Matmul, ForwardMatchesDoubleReference) {
  MatmulCase m;
  testing::fill(m.out, testing::kNaN);  // out is written, never read
  matmul_forward(m.out, m.x, m.weight, m.bias);
  testing::expect_close(m.out, m.reference(true), 1e-5, 1e-5, "out with bias");
  testing::fill(m.out, testing::kNaN);
  matmul_forward(m.out, m.x, m.weight, Tensor());
  testing::expect_close(m.out, m.reference(false), 1e-5, 1e-5, "out without bias");
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  MatmulCase m;
  auto loss = [&] {
    matmul_forward(m.out, m.x, m.weight, m.bias);
    return testing::dot(m.out, m.dout);
  };
  const std::vector<double> dx_fd = testing::numeric_gradient(m.x, loss, 1e-2f);
  const std::vector<double> dw_fd = testing::numeric_gradient(m.weight, loss, 1e-2f);
  const std::vector<double> db_fd = testing::numeric_gradient(m.bias, loss, 1e-2f);
  Tensor dx = Tensor::zeros({m.B, m.T, m.C}), dw = Tensor::zeros({m.OC, m.C}), db = Tensor::zeros({m.OC});
  matmul_backward(dx, dw, db, m.dout, m.x, m.weight);
  testing::expect_close(dx, dx_fd, 1e-3, 1e-3, "dx");
  testing::expect_close(dw, dw_fd, 1e-3, 1e-3, "dweight");
  testing::expect_close(db, db_fd, 1e-3, 1e-3, "dbias");
}

TEST(Matmul, BackwardWritesDxAndAccumulatesParameterGradients) {
  MatmulCase m;
  Tensor dx = Tensor::zeros({m.B, m.T, m.C}), dw = Tensor::zeros({m.OC, m.C}), db = Tensor::zeros({m.OC});
  matmul_backward(dx, dw, db, m.dout, m.x, m.weight);
  const Tensor dx1 = testing::copy_of(dx), dw1 = testing::copy_of(dw), db1 = testing::copy_of(db);
  testing::fill(dx, testing::kNaN);
  matmul_backward(dx, dw, db, m.dout, m.x, m.weight);
  for (int64_t i = 0; i < dx.numel(); i++) EXPECT_EQ(dx.f32()[i], dx1.f32()[i]);
  for (int64_t i = 0; i < dw.numel(); i++) EXPECT_FLOAT_EQ(dw.f32()[i], 2.0f * dw1.f32()[i]);
  for (int64_t i = 0; i < db.numel(); i++) EXPECT_FLOAT_EQ(db.f32()[i], 2.0f * db1.f32()[i]);
}

TEST(Matmul, BackwardSkipsUndefinedDxAndDbias) {
  MatmulCase m;
  Tensor dx, db, dw = Tensor::zeros({m.OC, m.C}), dw_full = Tensor::zeros({m.OC, m.C});
  matmul_backward(dx, dw, db, m.dout, m.x, m.weight);
  Tensor dx_full = Tensor::zeros({m.B, m.T, m.C}), db_full = Tensor::zeros({m.OC});
  matmul_backward(dx_full, dw_full, db_full, m.dout, m.x, m.weight);
  for (int64_t i = 0; i < dw.numel(); i++) EXPECT_EQ(dw.f32()[i], dw_full.f32()[i]);
  EXPECT_FALSE(dx.defined());
}

TEST(Matmul, OneThreadAndSeveralAgree) {
  const int64_t N = 256, C = 24, OC = 200;  // bias fill and dbias above the parallel threshold
  Tensor x = random_tensor({N, C}, 25), weight = random_tensor({OC, C}, 26), bias = random_tensor({OC}, 27);
  Tensor dout = random_tensor({N, OC}, 28);
  Tensor out[2], db[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({N, OC});
    db[run] = Tensor::zeros({OC});
    Tensor dw = Tensor::zeros({OC, C}), dx;
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      matmul_forward(out[run], x, weight, bias);
      matmul_backward(dx, dw, db[run], dout, x, weight);
    });
  }
  testing::expect_close(out[1], std::vector<double>(out[0].f32(), out[0].f32() + out[0].numel()), 1e-6, 1e-6,
                        "out");
  testing::expect_identical(db[0], db[1], "dbias");
}

TEST(Matmul, RejectsBadShapes) {
  MatmulCase m;
  Tensor wrong_weight = Tensor::zeros({m.OC, m.C + 1});
  EXPECT_THROW(matmul_forward(m.out, m.x, wrong_weight, m.bias), Error);
  Tensor wrong_bias = Tensor::zeros({m.OC + 1});
  EXPECT_THROW(matmul_forward(m.out, m.x, m.weight, wrong_bias), Error);
  Tensor wrong_out = Tensor::zeros({m.B * m.T, m.OC});  // leading shape must follow x
  EXPECT_THROW(matmul_forward(wrong_out, m.x, m.weight, m.bias), Error);
  Tensor dx = Tensor::zeros({m.B, m.T, m.C}), db = Tensor::zeros({m.OC}), wrong_dw = Tensor::zeros({m.C, m.OC});
  EXPECT_THROW(matmul_backward(dx, wrong_dw, db, m.dout, m.x, m.weight), Error);
  Tensor dw = Tensor::zeros({m.OC, m.C}), wrong_dout = Tensor::zeros({m.B, m.T, m.OC + 1});
  EXPECT_THROW(matmul_backward(dx, dw, db, wrong_dout, m.x, m.weight), Error);
  Tensor undefined_dweight;  // dbias comes with the weight part
  EXPECT_NE(testing::error_of([&] { matmul_backward(dx, undefined_dweight, db, m.dout, m.x, m.weight); })
                .find("dbias without dweight"),
            std::string::npos);
}

// Zero-bubble's split: the input gradient alone, then the weight gradients alone, give the whole
// backward's values bit for bit (the same GEMMs).
TEST(Matmul, SplitBackwardEqualsTheWhole) {
  MatmulCase m;
  Tensor dx = Tensor::zeros({m.B, m.T, m.C}), dw = Tensor::zeros({m.OC, m.C}), db = Tensor::zeros({m.OC});
  matmul_backward(dx, dw, db, m.dout, m.x, m.weight);
  Tensor split_dx = Tensor::zeros({m.B, m.T, m.C}), split_dw = Tensor::zeros({m.OC, m.C}), split_db = Tensor::zeros({m.OC});
  Tensor none, no_bias;
  matmul_backward(split_dx, none, no_bias, m.dout, m.x, m.weight);
  testing::expect_identical(split_dx, dx, "dx");
  matmul_backward(none, split_dw, split_db, m.dout, m.x, m.weight);
  testing::expect_identical(split_dw, dw, "dweight");
  testing::expect_identical(split_db, db, "dbias");
}

TEST(Matmul, RejectsBf16OnTheCpu) {
  MatmulCase m;
  const Tensor x16 = Tensor::zeros({m.B, m.T, m.C}, DType::bf16), w16 = Tensor::zeros({m.OC, m.C}, DType::bf16);
  Tensor out16 = Tensor::zeros({m.B, m.T, m.OC}, DType::bf16);
  const std::string message = testing::error_of([&] { matmul_forward(out16, x16, w16, Tensor()); });
  EXPECT_TRUE(testing::contains(message, "bf16 on the CPU")) << message;
}

TEST(Matmul, GeluForwardIsMatmulThenGelu) {
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    MatmulCase m;
    const Tensor bias = with_bias ? m.bias : Tensor();
    Tensor pre = Tensor::zeros({m.B, m.T, m.OC}), out = Tensor::zeros({m.B, m.T, m.OC});
    testing::fill(pre, testing::kNaN);  // both outputs are written, never read
    testing::fill(out, testing::kNaN);
    matmul_gelu_forward(out, pre, m.x, m.weight, bias);
    Tensor pre_ref = Tensor::zeros({m.B, m.T, m.OC}), out_ref = Tensor::zeros({m.B, m.T, m.OC});
    matmul_forward(pre_ref, m.x, m.weight, bias);
    gelu_forward(out_ref, pre_ref);
    testing::expect_identical(pre, pre_ref, "pre_gelu");
    testing::expect_identical(out, out_ref, "out");
  }
}

TEST(Matmul, BackwardDgeluIsMatmulBackwardThenGeluBackward) {
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    MatmulCase m;
    const Tensor x_pre_gelu = random_tensor({m.B, m.T, m.C}, 29, -3.0f, 3.0f);
    Tensor dx = Tensor::zeros({m.B, m.T, m.C}), dw = random_tensor({m.OC, m.C}, 30);
    Tensor db = with_bias ? random_tensor({m.OC}, 31) : Tensor();
    Tensor dx_ref = Tensor::zeros({m.B, m.T, m.C}), dw_ref = testing::copy_of(dw);
    Tensor db_ref = with_bias ? testing::copy_of(db) : Tensor();
    testing::fill(dx, testing::kNaN);  // dx is written; dweight and dbias accumulate onto their values
    matmul_backward_dgelu(dx, dw, db, m.dout, m.x, m.weight, x_pre_gelu);
    Tensor d_x = Tensor::zeros({m.B, m.T, m.C});  // the gradient of x, before the GELU
    matmul_backward(d_x, dw_ref, db_ref, m.dout, m.x, m.weight);
    gelu_backward(dx_ref, d_x, x_pre_gelu);
    testing::expect_identical(dx, dx_ref, "dx");
    testing::expect_identical(dw, dw_ref, "dweight");
    if (with_bias) testing::expect_identical(db, db_ref, "dbias");
  }
}

TEST(Matmul, FusedGeluOpsRejectBadArguments) {
  MatmulCase m;
  Tensor out = Tensor::zeros({m.B, m.T, m.OC}), wrong_pre = Tensor::zeros({m.B, m.T, m.OC + 1});
  EXPECT_TRUE(testing::contains(testing::error_of([&] { matmul_gelu_forward(out, wrong_pre, m.x, m.weight, m.bias); }),
                                "pre_gelu"));
  Tensor undefined_pre;
  EXPECT_THROW(matmul_gelu_forward(out, undefined_pre, m.x, m.weight, m.bias), Error);
  Tensor dx = Tensor::zeros({m.B, m.T, m.C}), dw = Tensor::zeros({m.OC, m.C}), db = Tensor::zeros({m.OC});
  const Tensor wrong_x_pre = Tensor::zeros({m.B * m.T, m.C});  // leading shape must follow x
  EXPECT_TRUE(testing::contains(
      testing::error_of([&] { matmul_backward_dgelu(dx, dw, db, m.dout, m.x, m.weight, wrong_x_pre); }),
      "x_pre_gelu"));
  Tensor undefined_dx;  // the fused backward always writes dx: it is the point of the fusion
  const Tensor x_pre = Tensor::zeros({m.B, m.T, m.C});
  EXPECT_TRUE(testing::contains(
      testing::error_of([&] { matmul_backward_dgelu(undefined_dx, dw, db, m.dout, m.x, m.weight, x_pre); }),
      "dx is undefined"));
}

// The tuning setting is checked wherever it is set, naming the flag; the CPU ignores it (no records).
TEST(Matmul, TuningOutOfRangeIsRefusedNamingTheFlag) {
  for (const int bad : {0, -1, kMaxMatmulTuning + 1}) {
    const std::string message = testing::error_of([&] { set_matmul_tuning(bad); });
    EXPECT_TRUE(testing::contains(message, "--matmul-tuning " + std::to_string(bad))) << message;
  }
  set_matmul_tuning(kMaxMatmulTuning);
  MatmulCase m;
  Tensor out = Tensor::zeros({m.B, m.T, m.OC});
  matmul_forward(out, m.x, m.weight, m.bias);
  set_matmul_tuning(1);
  EXPECT_TRUE(matmul_tuning_records().empty());
}

// The experts' row buckets: known values, then for every count up to 20,000 a bucket at or above it, a
// multiple of 8, its own bucket, less than an eighth of the count's power of two above it (or 8), and
// at most eight bucket sizes between one power of two and the next.
TEST(Matmul, RowBucketsAreEightPerPowerOfTwo) {
  const std::pair<int64_t, int64_t> known[] = {{1, 8},       {8, 8},       {9, 16},       {100, 104},
                                               {2048, 2048}, {2049, 2304}, {4095, 4096}, {10672, 11264}};
  for (const auto& [rows, bucket] : known) EXPECT_EQ(matmul_row_bucket(rows), bucket) << rows;
  std::vector<std::set<int64_t>> per_octave(17);  // by the bucket's power of two
  for (int64_t rows = 1; rows <= 20000; rows++) {
    const int64_t bucket = matmul_row_bucket(rows);
    int64_t octave = 1;
    while (octave * 2 <= rows) octave *= 2;
    ASSERT_GE(bucket, rows);
    ASSERT_EQ(bucket % 8, 0) << rows;
    ASSERT_EQ(matmul_row_bucket(bucket), bucket) << rows;
    ASSERT_LT(bucket - rows, std::max<int64_t>(8, octave / 8)) << rows;
    per_octave[size_t(std::bit_width(uint64_t(bucket)) - 1)].insert(bucket);
  }
  for (const std::set<int64_t>& buckets : per_octave) EXPECT_LE(buckets.size(), 8u);
  EXPECT_TRUE(testing::contains(testing::error_of([] { matmul_row_bucket(0); }), "rows = 0 must be positive"));
}

}  // namespace
}  // namespace tessera
