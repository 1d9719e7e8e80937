// Causal self-attention, multi-head and grouped-query: out and lse against a double reference over
// shapes that span several query tiles (T not a multiple of anything, several heads), gradients by
// finite differences, GQA against MHA on duplicated kv heads, causality, the written dqkv, thread-count
// independence, bad shapes and head counts; Gemma 2's soft-capped scores against the reference and finite
// differences, and bad caps.
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
  int64_t NKV = 0;  // kv heads; 0 = NH (multi-head)
  int64_t kv_heads() const { return NKV == 0 ? NH : NKV; }
  int64_t head_size() const { return C / NH; }
  int64_t width() const { return (NH + 2 * kv_heads()) * head_size(); }  // qkv's last dim
  Shape qkv_shape() const { return {B, T, width()}; }
};

::testing::Message describe(const AttentionShape& s) {
  return ::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH
                              << " NKV=" << s.kv_heads();
}

// out (B,T,C) and lse (B,NH,T) computed in double with plain loops; query head h reads kv head
// h / (NH / NKV) of qkv (B, T, (NH + 2*NKV) * HS); softcap > 0 caps each score s at softcap tanh(s / softcap).
void reference_attention(const Tensor& qkv, const AttentionShape& s, std::vector<double>& out,
                         std::vector<double>& lse, double softcap = 0.0) {
  const int64_t HS = s.head_size(), W = s.width(), NKV = s.kv_heads();
  out.assign(size_t(s.B * s.T * s.C), 0.0);
  lse.assign(size_t(s.B * s.NH * s.T), 0.0);
  const float* x = qkv.f32();
  std::vector<double> w(size_t(s.T));
  for (int64_t b = 0; b < s.B; b++)
    for (int64_t h = 0; h < s.NH; h++) {
      const int64_t k_at = s.C + (h / (s.NH / NKV)) * HS, v_at = k_at + NKV * HS;
      for (int64_t i = 0; i < s.T; i++) {
        const float* q = x + (b * s.T + i) * W + h * HS;
        double max_s = -INFINITY;
        for (int64_t j = 0; j <= i; j++) {
          const float* k = x + (b * s.T + j) * W + k_at;
          double dot = 0.0;
          for (int64_t d = 0; d < HS; d++) dot += double(q[d]) * k[d];
          w[size_t(j)] = dot / std::sqrt(double(HS));
          if (softcap > 0.0) w[size_t(j)] = softcap * std::tanh(w[size_t(j)] / softcap);
          max_s = std::max(max_s, w[size_t(j)]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; j++) sum += (w[size_t(j)] = std::exp(w[size_t(j)] - max_s));
        lse[size_t((b * s.NH + h) * s.T + i)] = max_s + std::log(sum);
        for (int64_t j = 0; j <= i; j++) {
          const float* v = x + (b * s.T + j) * W + v_at;
          for (int64_t d = 0; d < HS; d++) out[size_t((b * s.T + i) * s.C + h * HS + d)] += w[size_t(j)] / sum * v[d];
        }
      }
    }
}

void check_forward_against_reference(const AttentionShape& s, float softcap = 0.0f) {
  SCOPED_TRACE(describe(s) << " softcap=" << softcap);
  Tensor qkv = random_tensor(s.qkv_shape(), 31, -2.0f, 2.0f);
  Tensor out = Tensor::zeros({s.B, s.T, s.C}), lse = Tensor::zeros({s.B, s.NH, s.T});
  attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), {}, softcap);
  std::vector<double> out_ref, lse_ref;
  reference_attention(qkv, s, out_ref, lse_ref, softcap);
  testing::expect_close(out, out_ref, 2e-5, 1e-4, "out");
  testing::expect_close(lse, lse_ref, 2e-5, 1e-5, "lse");
}

TEST(Attention, ForwardMatchesDoubleReference) {
  // Query tiles are 64 rows: these cover one partial tile, exact tiles and a partial last tile.
  for (AttentionShape s : {AttentionShape{1, 1, 4, 1}, AttentionShape{2, 5, 6, 3}, AttentionShape{1, 64, 8, 2},
                           AttentionShape{1, 65, 8, 2}, AttentionShape{2, 150, 12, 3}})
    check_forward_against_reference(s);
}

TEST(Attention, GroupedQueryForwardMatchesDoubleReference) {
  for (AttentionShape s : {AttentionShape{2, 5, 8, 4, 2}, AttentionShape{1, 65, 16, 4, 1},
                           AttentionShape{2, 150, 24, 6, 3}, AttentionShape{1, 70, 16, 8, 2}})
    check_forward_against_reference(s);
}

void check_backward_by_finite_differences(const AttentionShape& s, float softcap = 0.0f) {
  SCOPED_TRACE(describe(s) << " softcap=" << softcap);
  Tensor qkv = random_tensor(s.qkv_shape(), 41, -1.5f, 1.5f);
  Tensor dout = random_tensor({s.B, s.T, s.C}, 42);
  Tensor out = Tensor::zeros({s.B, s.T, s.C}), lse = Tensor::zeros({s.B, s.NH, s.T});
  auto loss = [&] {
    attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), {}, softcap);
    return testing::dot(out, dout);
  };
  const std::vector<double> dqkv_fd = testing::numeric_gradient(qkv, loss, 1e-2f);
  loss();
  Tensor dqkv = Tensor::zeros(qkv.shape());
  attention_backward(dqkv, dout, qkv, out, lse, int(s.NH), int(s.NKV), {}, softcap);
  testing::expect_close(dqkv, dqkv_fd, 2e-3, 1e-2, "dqkv");
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  check_backward_by_finite_differences({2, 7, 6, 3});
  check_backward_by_finite_differences({1, 66, 2, 1});  // two query tiles, the second partial
}

TEST(Attention, GroupedQueryBackwardMatchesFiniteDifferences) {
  check_backward_by_finite_differences({2, 7, 8, 4, 2});   // two query heads per kv head
  check_backward_by_finite_differences({2, 6, 8, 4, 1});   // multi-query: one kv head for all
  check_backward_by_finite_differences({1, 66, 4, 2, 1});  // two query tiles, the second partial
}

// Gemma 2's soft cap, at caps that bend these draws' scores (up to about 4 in the forward's, 1.5 in the
// backward's) hard and gently.
TEST(Attention, SoftCappedForwardMatchesDoubleReference) {
  for (float softcap : {0.5f, 3.0f})
    for (AttentionShape s : {AttentionShape{2, 5, 6, 3}, AttentionShape{1, 65, 8, 2}, AttentionShape{2, 70, 16, 4, 2}})
      check_forward_against_reference(s, softcap);
}

TEST(Attention, SoftCappedBackwardMatchesFiniteDifferences) {
  for (float softcap : {0.4f, 2.0f}) {
    check_backward_by_finite_differences({2, 7, 6, 3}, softcap);
    check_backward_by_finite_differences({1, 66, 4, 2, 1}, softcap);  // GQA, two query tiles
  }
}

// The cap changes the result (a test of the cap's tests), and a negative or non-finite cap is refused.
TEST(Attention, SoftCapBendsScoresAndRefusesBadCaps) {
  const AttentionShape s{1, 9, 8, 2};
  const Tensor qkv = random_tensor(s.qkv_shape(), 31, -2.0f, 2.0f);
  Tensor plain = Tensor::zeros({s.B, s.T, s.C}), capped = Tensor::zeros({s.B, s.T, s.C});
  Tensor lse = Tensor::zeros({s.B, s.NH, s.T});
  attention_forward(plain, lse, qkv, int(s.NH));
  attention_forward(capped, lse, qkv, int(s.NH), 0, {}, 0.5f);
  double moved = 0.0;
  for (int64_t i = 0; i < plain.numel(); i++) moved = std::max(moved, double(std::fabs(plain.f32()[i] - capped.f32()[i])));
  EXPECT_GT(moved, 0.05);
  for (float bad : {-1.0f, float(INFINITY), testing::kNaN}) {
    const std::string message =
        testing::error_of([&] { attention_forward(capped, lse, qkv, int(s.NH), 0, {}, bad); });
    EXPECT_NE(message.find("attention_forward: softcap is"), std::string::npos) << message;
  }
}

// qkv of multi-head attention (B,T,3C) whose kv head h is the GQA kv head h / (NH / NKV).
Tensor duplicate_kv_heads(const Tensor& qkv, const AttentionShape& s) {
  const int64_t HS = s.head_size(), W = s.width(), NKV = s.kv_heads(), group = s.NH / NKV;
  Tensor mha = Tensor::zeros({s.B, s.T, 3 * s.C});
  for (int64_t bt = 0; bt < s.B * s.T; bt++) {
    const float* x = qkv.f32() + bt * W;
    float* y = mha.f32() + bt * 3 * s.C;
    std::copy(x, x + s.C, y);
    for (int64_t h = 0; h < s.NH; h++)
      for (int64_t d = 0; d < HS; d++) {
        y[s.C + h * HS + d] = x[s.C + (h / group) * HS + d];
        y[2 * s.C + h * HS + d] = x[s.C + NKV * HS + (h / group) * HS + d];
      }
  }
  return mha;
}

// dqkv of the GQA layout from the MHA run's: dq as is, dk and dv of kv head g summed (in double)
// over the query heads of its group.
std::vector<double> sum_kv_groups(const Tensor& dqkv_mha, const AttentionShape& s) {
  const int64_t HS = s.head_size(), W = s.width(), NKV = s.kv_heads(), group = s.NH / NKV;
  std::vector<double> grad(size_t(s.B * s.T * W), 0.0);
  for (int64_t bt = 0; bt < s.B * s.T; bt++) {
    const float* y = dqkv_mha.f32() + bt * 3 * s.C;
    double* x = grad.data() + bt * W;
    for (int64_t c = 0; c < s.C; c++) x[c] = y[c];
    for (int64_t h = 0; h < s.NH; h++)
      for (int64_t d = 0; d < HS; d++) {
        x[s.C + (h / group) * HS + d] += y[s.C + h * HS + d];
        x[s.C + NKV * HS + (h / group) * HS + d] += y[2 * s.C + h * HS + d];
      }
  }
  return grad;
}

TEST(Attention, GroupedQueryEqualsMultiHeadOnDuplicatedKvHeads) {
  for (AttentionShape s : {AttentionShape{2, 70, 16, 4, 2}, AttentionShape{1, 130, 12, 6, 1}}) {
    SCOPED_TRACE(describe(s));
    const Tensor qkv = random_tensor(s.qkv_shape(), 81, -2.0f, 2.0f), dout = random_tensor({s.B, s.T, s.C}, 82);
    const Tensor qkv_mha = duplicate_kv_heads(qkv, s);
    Tensor out = Tensor::zeros({s.B, s.T, s.C}), lse = Tensor::zeros({s.B, s.NH, s.T});
    Tensor out_mha = Tensor::zeros({s.B, s.T, s.C}), lse_mha = Tensor::zeros({s.B, s.NH, s.T});
    attention_forward(out, lse, qkv, int(s.NH), int(s.NKV));
    attention_forward(out_mha, lse_mha, qkv_mha, int(s.NH));
    const auto as_double = [](const Tensor& t) { return std::vector<double>(t.f32(), t.f32() + t.numel()); };
    testing::expect_close(out, as_double(out_mha), 1e-6, 1e-6, "out");
    testing::expect_close(lse, as_double(lse_mha), 1e-6, 1e-6, "lse");
    Tensor dqkv = Tensor::zeros(qkv.shape()), dqkv_mha = Tensor::zeros(qkv_mha.shape());
    attention_backward(dqkv, dout, qkv, out, lse, int(s.NH), int(s.NKV));
    attention_backward(dqkv_mha, dout, qkv_mha, out_mha, lse_mha, int(s.NH));
    testing::expect_close(dqkv, sum_kv_groups(dqkv_mha, s), 1e-6, 1e-6, "dqkv");
  }
}

TEST(Attention, MultiHeadIsTheDefaultKvHeadCount) {
  const AttentionShape s{2, 100, 16, 4};
  const Tensor qkv = random_tensor(s.qkv_shape(), 85), dout = random_tensor({s.B, s.T, s.C}, 86);
  Tensor out[3], lse[3], dqkv[3];
  for (int run = 0; run < 3; run++) {  // num_kv_heads omitted, 0, num_heads
    out[run] = Tensor::zeros({s.B, s.T, s.C});
    lse[run] = Tensor::zeros({s.B, s.NH, s.T});
    dqkv[run] = Tensor::zeros(qkv.shape());
    if (run == 0) {
      attention_forward(out[run], lse[run], qkv, int(s.NH));
      attention_backward(dqkv[run], dout, qkv, out[run], lse[run], int(s.NH));
    } else {
      const int num_kv_heads = run == 1 ? 0 : int(s.NH);
      attention_forward(out[run], lse[run], qkv, int(s.NH), num_kv_heads);
      attention_backward(dqkv[run], dout, qkv, out[run], lse[run], int(s.NH), num_kv_heads);
    }
  }
  for (int run = 1; run < 3; run++) {
    testing::expect_identical(out[0], out[run], "out");
    testing::expect_identical(lse[0], lse[run], "lse");
    testing::expect_identical(dqkv[0], dqkv[run], "dqkv");
  }
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

void check_one_thread_and_several_agree(const AttentionShape& s) {
  SCOPED_TRACE(describe(s));
  Tensor qkv = random_tensor(s.qkv_shape(), 65), dout = random_tensor({s.B, s.T, s.C}, 66);
  Tensor out[2], lse[2], dqkv[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({s.B, s.T, s.C});
    lse[run] = Tensor::zeros({s.B, s.NH, s.T});
    dqkv[run] = Tensor::zeros(qkv.shape());
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      attention_forward(out[run], lse[run], qkv, int(s.NH), int(s.NKV));
      attention_backward(dqkv[run], dout, qkv, out[run], lse[run], int(s.NH), int(s.NKV));
    });
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(lse[0], lse[1], "lse");
  testing::expect_identical(dqkv[0], dqkv[1], "dqkv");
}

TEST(Attention, OneThreadAndSeveralAgree) {
  check_one_thread_and_several_agree({2, 100, 16, 2});  // above the parallel threshold, two query tiles
}

TEST(Attention, GroupedQueryOneThreadAndSeveralAgree) {
  check_one_thread_and_several_agree({2, 100, 16, 4, 2});  // 4 (b, kv head) pairs over 3 threads
  check_one_thread_and_several_agree({3, 100, 16, 4, 1});
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

TEST(Attention, RejectsBadKvHeadCounts) {
  // NH = 4, NKV = 2, HS = 2: qkv (2, 5, 16), out (2, 5, 8), lse (2, 4, 5).
  Tensor qkv = random_tensor({2, 5, 16}, 73);
  Tensor out = Tensor::zeros({2, 5, 8}), lse = Tensor::zeros({2, 4, 5}), dqkv = Tensor::zeros({2, 5, 16});
  attention_forward(out, lse, qkv, 4, 2);  // the good call
  const auto forward = [&](int num_heads, int num_kv_heads) {
    return testing::error_of([&] { attention_forward(out, lse, qkv, num_heads, num_kv_heads); });
  };
  EXPECT_TRUE(testing::contains(forward(4, 3), "num_kv_heads = 3 must divide num_heads = 4"));
  EXPECT_TRUE(testing::contains(forward(4, -2), "num_kv_heads = -2"));
  EXPECT_TRUE(testing::contains(forward(0, 0), "num_heads = 0"));
  EXPECT_TRUE(testing::contains(forward(4, 1), "last dim of qkv"));  // MQA wants (4 + 2) * HS
  EXPECT_TRUE(testing::contains(forward(2, 2), "last dim of qkv"));  // MHA wants 3 * 2 * HS
  const std::string backward =
      testing::error_of([&] { attention_backward(dqkv, out, qkv, out, lse, 4, 3); });
  EXPECT_TRUE(testing::contains(backward, "attention_backward: num_kv_heads = 3 must divide num_heads = 4"));
  Tensor wide_out = Tensor::zeros({2, 5, 16});  // out is (B, T, NH*HS), not qkv's width
  EXPECT_THROW(attention_forward(wide_out, lse, qkv, 4, 2), Error);
  Tensor kv_lse = Tensor::zeros({2, 2, 5});  // lse has one row per query head
  EXPECT_THROW(attention_forward(out, kv_lse, qkv, 4, 2), Error);
}

}  // namespace
}  // namespace tessera
