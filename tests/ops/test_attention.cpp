// Causal self-attention: out and lse against a double reference over shapes that span several query
// tiles (T not a multiple of anything, several heads), gradients by finite differences, causality,
// the written dqkv, bad shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ops/attention.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::random_tensor;

struct AttentionShape {
  int64_t B, T, C, NH;
};

// out (B,T,C) and lse (B,NH,T) computed in double with plain loops.
void reference_attention(const Tensor& qkv, const AttentionShape& s, std::vector<double>& out,
                         std::vector<double>& lse) {
  const int64_t HS = s.C / s.NH, C3 = 3 * s.C;
  out.assign(size_t(s.B * s.T * s.C), 0.0);
  lse.assign(size_t(s.B * s.NH * s.T), 0.0);
  const float* x = qkv.f32();
  std::vector<double> w(size_t(s.T));
  for (int64_t b = 0; b < s.B; b++)
    for (int64_t h = 0; h < s.NH; h++)
      for (int64_t i = 0; i < s.T; i++) {
        const float* q = x + (b * s.T + i) * C3 + h * HS;
        double max_s = -INFINITY;
        for (int64_t j = 0; j <= i; j++) {
          const float* k = x + (b * s.T + j) * C3 + s.C + h * HS;
          double dot = 0.0;
          for (int64_t d = 0; d < HS; d++) dot += double(q[d]) * k[d];
          w[size_t(j)] = dot / std::sqrt(double(HS));
          max_s = std::max(max_s, w[size_t(j)]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; j++) sum += (w[size_t(j)] = std::exp(w[size_t(j)] - max_s));
        lse[size_t((b * s.NH + h) * s.T + i)] = max_s + std::log(sum);
        for (int64_t j = 0; j <= i; j++) {
          const float* v = x + (b * s.T + j) * C3 + 2 * s.C + h * HS;
          for (int64_t d = 0; d < HS; d++) out[size_t((b * s.T + i) * s.C + h * HS + d)] += w[size_t(j)] / sum * v[d];
        }
      }
}

TEST(Attention, ForwardMatchesDoubleReference) {
  // Query tiles are 64 rows: these cover one partial tile, exact tiles and a partial last tile.
  for (AttentionShape s : {AttentionShape{1, 1, 4, 1}, AttentionShape{2, 5, 6, 3}, AttentionShape{1, 64, 8, 2},
                           AttentionShape{1, 65, 8, 2}, AttentionShape{2, 150, 12, 3}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
    Tensor qkv = random_tensor({s.B, s.T, 3 * s.C}, 31, -2.0f, 2.0f);
    Tensor out = Tensor::zeros({s.B, s.T, s.C}), lse = Tensor::zeros({s.B, s.NH, s.T});
    attention_forward(out, lse, qkv, int(s.NH));
    std::vector<double> out_ref, lse_ref;
    reference_attention(qkv, s, out_ref, lse_ref);
    testing::expect_close(out, out_ref, 2e-5, 1e-4, "out");
    testing::expect_close(lse, lse_ref, 2e-5, 1e-5, "lse");
  }
}

void check_backward_by_finite_differences(const AttentionShape& s) {
  SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
  Tensor qkv = random_tensor({s.B, s.T, 3 * s.C}, 41, -1.5f, 1.5f);
  Tensor dout = random_tensor({s.B, s.T, s.C}, 42);
  Tensor out = Tensor::zeros({s.B, s.T, s.C}), lse = Tensor::zeros({s.B, s.NH, s.T});
  auto loss = [&] {
    attention_forward(out, lse, qkv, int(s.NH));
    return testing::dot(out, dout);
  };
  const std::vector<double> dqkv_fd = testing::numeric_gradient(qkv, loss, 1e-2f);
  loss();
  Tensor dqkv = Tensor::zeros(qkv.shape());
  attention_backward(dqkv, dout, qkv, out, lse, int(s.NH));
  testing::expect_close(dqkv, dqkv_fd, 2e-3, 1e-2, "dqkv");
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  check_backward_by_finite_differences({2, 7, 6, 3});
  check_backward_by_finite_differences({1, 66, 2, 1});  // two query tiles, the second partial
}

TEST(Attention, BackwardWritesDqkv) {
  const AttentionShape s{2, 67, 8, 2};
  Tensor qkv = random_tensor({s.B, s.T, 3 * s.C}, 51);
  Tensor dout = random_tensor({s.B, s.T, s.C}, 52);
  Tensor out = Tensor::zeros({s.B, s.T, s.C}), lse = Tensor::zeros({s.B, s.NH, s.T});
  attention_forward(out, lse, qkv, int(s.NH));
  Tensor dqkv = Tensor::zeros(qkv.shape());
  attention_backward(dqkv, dout, qkv, out, lse, int(s.NH));
  const Tensor first = testing::copy_of(dqkv);
  testing::fill(dqkv, testing::kNaN);
  attention_backward(dqkv, dout, qkv, out, lse, int(s.NH));
  for (int64_t i = 0; i < dqkv.numel(); i++) ASSERT_EQ(dqkv.f32()[i], first.f32()[i]) << i;
}

TEST(Attention, FutureKeysAndValuesDoNotChangeEarlierOutputs) {
  const AttentionShape s{2, 100, 8, 2};
  const int64_t t0 = 70, C3 = 3 * s.C;  // t0 lies in the second query tile
  Tensor qkv = random_tensor({s.B, s.T, C3}, 61);
  Tensor out = Tensor::zeros({s.B, s.T, s.C}), lse = Tensor::zeros({s.B, s.NH, s.T});
  attention_forward(out, lse, qkv, int(s.NH));
  const Tensor out_before = testing::copy_of(out), lse_before = testing::copy_of(lse);
  float* kv = qkv.f32() + (1 * s.T + t0) * C3 + s.C;  // k and v of token t0 in batch 1
  for (int64_t c = 0; c < 2 * s.C; c++) kv[c] += 3.0f;
  attention_forward(out, lse, qkv, int(s.NH));
  for (int64_t b = 0; b < s.B; b++)
    for (int64_t t = 0; t < s.T; t++) {
      const float* now = out.f32() + (b * s.T + t) * s.C;
      const float* before = out_before.f32() + (b * s.T + t) * s.C;
      const bool sees_change = b == 1 && t >= t0;
      bool changed = false;
      for (int64_t c = 0; c < s.C; c++) changed |= now[c] != before[c];
      EXPECT_EQ(changed, sees_change) << "b=" << b << " t=" << t;
    }
  for (int64_t h = 0; h < s.NH; h++)
    for (int64_t t = 0; t < t0; t++)
      EXPECT_EQ(lse.f32()[(s.NH + h) * s.T + t], lse_before.f32()[(s.NH + h) * s.T + t]) << "h=" << h << " t=" << t;
}

TEST(Attention, OneThreadAndSeveralAgree) {
  const AttentionShape s{2, 100, 16, 2};  // above the parallel threshold, two query tiles
  Tensor qkv = random_tensor({s.B, s.T, 3 * s.C}, 65), dout = random_tensor({s.B, s.T, s.C}, 66);
  Tensor out[2], lse[2], dqkv[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({s.B, s.T, s.C});
    lse[run] = Tensor::zeros({s.B, s.NH, s.T});
    dqkv[run] = Tensor::zeros(qkv.shape());
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      attention_forward(out[run], lse[run], qkv, int(s.NH));
      attention_backward(dqkv[run], dout, qkv, out[run], lse[run], int(s.NH));
    });
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(lse[0], lse[1], "lse");
  testing::expect_identical(dqkv[0], dqkv[1], "dqkv");
}

TEST(Attention, RejectsBadShapes) {
  Tensor qkv = random_tensor({2, 5, 24}, 71);  // C = 8
  Tensor out = Tensor::zeros({2, 5, 8}), lse = Tensor::zeros({2, 2, 5});
  EXPECT_THROW(attention_forward(out, lse, qkv, 3), Error);  // 3 heads do not split 8 channels
  EXPECT_THROW(attention_forward(out, lse, qkv, 0), Error);
  Tensor not_three = random_tensor({2, 5, 25}, 72);
  EXPECT_THROW(attention_forward(out, lse, not_three, 2), Error);
  Tensor wrong_lse = Tensor::zeros({2, 5, 2});
  EXPECT_THROW(attention_forward(out, wrong_lse, qkv, 2), Error);
  Tensor wrong_out = Tensor::zeros({2, 5, 24});
  EXPECT_THROW(attention_forward(wrong_out, lse, qkv, 2), Error);
  Tensor dqkv = Tensor::zeros({2, 5, 24}), wrong_dout = Tensor::zeros({2, 4, 8});
  EXPECT_THROW(attention_backward(dqkv, wrong_dout, qkv, out, lse, 2), Error);
  Tensor wrong_dqkv = Tensor::zeros({2, 5, 8});
  EXPECT_THROW(attention_backward(wrong_dqkv, out, qkv, out, lse, 2), Error);
}

}  // namespace
}  // namespace tessera
