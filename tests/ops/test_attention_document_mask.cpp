// Causal attention under document masks (packed sequences): every document of a window gives the out,
// lse and gradients of attention over that document alone (MHA and GQA, documents within a 64-row tile,
// across tiles and on a tile's edge, one-token documents); starts that are all 0 are plain causal
// attention bit for bit; thread counts agree bitwise; bad starts are refused with their position; a
// sliding window's starts (each row its latest W keys) give each row its own keys' attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_kv.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::random_tensor;

struct Shape4 {
  int64_t B, T, NH, NKV, HS;
  int64_t C() const { return NH * HS; }
  int64_t W() const { return (NH + 2 * NKV) * HS; }
};

// Rows [at, at + len) of sequence b of a (B, T, width) f32 tensor, as a (1, len, width) tensor, and back.
Tensor rows_of(const Tensor& t, int64_t b, int64_t at, int64_t len) {
  const int64_t T = t.size(1), width = t.size(2);
  Tensor rows = Tensor::zeros({1, len, width});
  std::copy_n(t.f32() + (b * T + at) * width, len * width, rows.f32());
  return rows;
}

std::vector<double> values(const Tensor& t) { return std::vector<double>(t.f32(), t.f32() + t.numel()); }

// The lse (1, NH, len) of rows [at, at + len) of sequence b of a (B, NH, T) tensor.
Tensor lse_rows_of(const Tensor& lse, int64_t b, int64_t at, int64_t len) {
  const int64_t NH = lse.size(1), T = lse.size(2);
  Tensor rows = Tensor::zeros({1, NH, len});
  for (int64_t h = 0; h < NH; h++) std::copy_n(lse.f32() + (b * NH + h) * T + at, len, rows.f32() + h * len);
  return rows;
}

void check_documents_attend_alone(const Shape4& s, const testing::DocumentLengths& lengths) {
  SCOPED_TRACE(::testing::Message() << "T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV);
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 11, -2.0f, 2.0f), dout = random_tensor({s.B, s.T, s.C()}, 12);
  const Tensor starts = testing::doc_starts_of_lengths(s.T, lengths);
  Tensor out = Tensor::zeros({s.B, s.T, s.C()}), lse = Tensor::zeros({s.B, s.NH, s.T});
  Tensor dqkv = Tensor::zeros(qkv.shape());
  attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), starts);
  attention_backward(dqkv, dout, qkv, out, lse, int(s.NH), int(s.NKV), starts);
  for (int64_t b = 0; b < s.B; b++) {
    int64_t at = 0;
    for (const int64_t len : lengths[size_t(b)]) {
      SCOPED_TRACE(::testing::Message() << "b=" << b << " document at " << at << " of " << len << " tokens");
      const Tensor doc = rows_of(qkv, b, at, len), doc_dout = rows_of(dout, b, at, len);
      Tensor doc_out = Tensor::zeros({1, len, s.C()}), doc_lse = Tensor::zeros({1, s.NH, len});
      Tensor doc_dqkv = Tensor::zeros(doc.shape());
      attention_forward(doc_out, doc_lse, doc, int(s.NH), int(s.NKV));
      attention_backward(doc_dqkv, doc_dout, doc, doc_out, doc_lse, int(s.NH), int(s.NKV));
      testing::expect_close(rows_of(out, b, at, len), values(doc_out), 1e-5, 1e-5, "out");
      testing::expect_close(lse_rows_of(lse, b, at, len), values(doc_lse), 1e-5, 1e-5, "lse");
      testing::expect_close(rows_of(dqkv, b, at, len), values(doc_dqkv), 1e-5, 1e-5, "dqkv");
      at += len;
    }
  }
}

TEST(AttentionDocumentMask, EachDocumentAttendsAsIfAlone) {
  // Query tiles are 64 rows: documents inside one, across two, ending exactly at a tile's edge, of one
  // token, and a window that is one document; a different cut in each sequence.
  check_documents_attend_alone({3, 150, 2, 2, 4}, {{5, 59, 1, 70, 15}, {64, 64, 22}, {150}});
  check_documents_attend_alone({2, 70, 4, 2, 3}, {{1, 1, 68}, {30, 40}});  // grouped-query attention
  check_documents_attend_alone({1, 9, 4, 1, 2}, {{2, 3, 4}});              // multi-query attention
}

TEST(AttentionDocumentMask, AllZeroStartsArePlainCausalAttention) {
  const Shape4 s{2, 100, 2, 1, 4};
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 21), dout = random_tensor({s.B, s.T, s.C()}, 22);
  const Tensor zeros = Tensor::zeros({s.B, s.T}, DType::i32);
  Tensor out[2], lse[2], dqkv[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({s.B, s.T, s.C()});
    lse[run] = Tensor::zeros({s.B, s.NH, s.T});
    dqkv[run] = Tensor::zeros(qkv.shape());
    const Tensor starts = run == 0 ? Tensor() : zeros;
    attention_forward(out[run], lse[run], qkv, int(s.NH), int(s.NKV), starts);
    attention_backward(dqkv[run], dout, qkv, out[run], lse[run], int(s.NH), int(s.NKV), starts);
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(lse[0], lse[1], "lse");
  testing::expect_identical(dqkv[0], dqkv[1], "dqkv");
}

TEST(AttentionDocumentMask, OneThreadAndSeveralAgree) {
  const Shape4 s{2, 100, 4, 2, 4};  // above the parallel threshold, two query tiles
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 31), dout = random_tensor({s.B, s.T, s.C()}, 32);
  const Tensor starts = testing::doc_starts_of_lengths(s.T, {{10, 80, 10}, {64, 36}});
  Tensor out[2], lse[2], dqkv[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({s.B, s.T, s.C()});
    lse[run] = Tensor::zeros({s.B, s.NH, s.T});
    dqkv[run] = Tensor::zeros(qkv.shape());
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      attention_forward(out[run], lse[run], qkv, int(s.NH), int(s.NKV), starts);
      attention_backward(dqkv[run], dout, qkv, out[run], lse[run], int(s.NH), int(s.NKV), starts);
    });
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(lse[0], lse[1], "lse");
  testing::expect_identical(dqkv[0], dqkv[1], "dqkv");
}

// A sliding window of W keys: starts max(document start, t - W + 1) rise by one a token. Each row's out
// and lse are attention over its own visible keys alone (a double-precision softmax of them), across
// 64-row tiles, with and without documents; the gradient of out · dout agrees with finite differences.
TEST(AttentionDocumentMask, SlidingWindowSeesItsLatestKeys) {
  const Shape4 s{2, 150, 4, 2, 8};
  const int64_t W = 37;
  const Tensor qkv0 = random_tensor({s.B, s.T, s.W()}, 43, -2.0f, 2.0f);
  Tensor starts = Tensor::zeros({s.B, s.T}, DType::i32);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t) {
      const int32_t document = b == 1 && t >= 90 ? 90 : 0;  // the second sequence holds two documents
      starts.data<int32_t>()[b * s.T + t] = std::max<int32_t>(document, int32_t(t - W + 1));
    }
  Tensor qkv = testing::copy_of(qkv0), out = Tensor::zeros({s.B, s.T, s.C()}), lse = Tensor::zeros({s.B, s.NH, s.T});
  attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), starts);
  const int64_t group = s.NH / s.NKV;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.NH; ++h) {
        const float* row = qkv.f32() + (b * s.T + t) * s.W();
        const int64_t kv = h / group, first = starts.data<int32_t>()[b * s.T + t];
        std::vector<double> scores;
        double top = -1e300;
        for (int64_t j = first; j <= t; ++j) {
          const float* key = qkv.f32() + (b * s.T + j) * s.W() + (s.NH + kv) * s.HS;
          double dot = 0;
          for (int64_t c = 0; c < s.HS; ++c) dot += double(row[h * s.HS + c]) * key[c];
          scores.push_back(dot / std::sqrt(double(s.HS)));
          top = std::max(top, scores.back());
        }
        double sum = 0;
        for (double& x : scores) sum += (x = std::exp(x - top));
        ASSERT_NEAR(lse.f32()[(b * s.NH + h) * s.T + t], top + std::log(sum), 1e-4) << b << " " << t << " " << h;
        for (int64_t c = 0; c < s.HS; ++c) {
          double want = 0;
          for (int64_t j = first; j <= t; ++j)
            want += scores[size_t(j - first)] / sum *
                    qkv.f32()[(b * s.T + j) * s.W() + (s.NH + s.NKV + kv) * s.HS + c];
          ASSERT_NEAR(out.f32()[(b * s.T + t) * s.C() + h * s.HS + c], want, 1e-5) << b << " " << t << " " << h;
        }
      }
  const Tensor dout = random_tensor({s.B, s.T, s.C()}, 44);
  Tensor dqkv = Tensor::zeros(qkv.shape());
  attention_backward(dqkv, dout, qkv, out, lse, int(s.NH), int(s.NKV), starts);
  auto loss = [&] {
    attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), starts);
    return testing::dot(out, dout);
  };
  for (const int64_t i : {int64_t(5), (s.T + 20) * s.W() + 3, (2 * s.T - 1) * s.W() - 1, (s.T + 120) * s.W() + 40}) {
    const float saved = qkv.f32()[i];
    qkv.f32()[i] = saved + 1e-2f;
    const double up = loss();
    qkv.f32()[i] = saved - 1e-2f;
    const double down = loss();
    qkv.f32()[i] = saved;
    EXPECT_NEAR(dqkv.f32()[i], (up - down) / 2e-2, 2e-3 + 2e-2 * std::fabs((up - down) / 2e-2)) << i;
  }
}

// Generation under the window: a key/value cache filled by a prompt of 5, then one token at a time,
// each attending over its window of the cache, gives the rows of attention over the whole sequence
// with the window's first keys; with Gemma 2's soft-capped scores too.
TEST(AttentionDocumentMask, SlidingWindowOverTheKeyValueCacheMatches) {
  const Shape4 s{1, 20, 4, 2, 8};
  const int64_t W = 6;
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 47, -2.0f, 2.0f);
  Tensor starts = Tensor::zeros({s.B, s.T}, DType::i32);
  for (int64_t t = 0; t < s.T; ++t) starts.data<int32_t>()[t] = int32_t(std::max<int64_t>(0, t - W + 1));
  for (float softcap : {0.0f, 1.5f}) {
    SCOPED_TRACE(::testing::Message() << "softcap " << softcap);
    Tensor whole = Tensor::zeros({s.B, s.T, s.C()}), lse = Tensor::zeros({s.B, s.NH, s.T});
    attention_forward(whole, lse, qkv, int(s.NH), int(s.NKV), starts, softcap);
    Tensor k_cache = Tensor::zeros({s.B, s.T, s.NKV * s.HS}), v_cache = Tensor::zeros({s.B, s.T, s.NKV * s.HS});
    for (int64_t past = 0; past < s.T;) {
      const int64_t Tq = past == 0 ? 5 : 1;
      Tensor out = Tensor::zeros({s.B, Tq, s.C()});
      attention_kv_forward(out, k_cache, v_cache, rows_of(qkv, 0, past, Tq), past, int(s.NH), int(s.NKV), W,
                           softcap);
      for (int64_t i = 0; i < Tq * s.C(); ++i)
        ASSERT_NEAR(out.f32()[i], whole.f32()[past * s.C() + i], 1e-5) << "position " << past + i / s.C();
      past += Tq;
    }
  }
}

TEST(AttentionDocumentMask, RefusesBadStarts) {
  const Shape4 s{1, 6, 2, 2, 2};
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 41);
  Tensor out = Tensor::zeros({s.B, s.T, s.C()}), lse = Tensor::zeros({s.B, s.NH, s.T});
  auto forward_with = [&](const Tensor& starts) {
    return testing::error_of([&] { attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), starts); });
  };
  auto starts_from = [](std::vector<int32_t> v) {
    Tensor t = Tensor::zeros({1, int64_t(v.size())}, DType::i32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  };
  attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), starts_from({0, 0, 2, 2, 4, 4}));  // the good call
  EXPECT_TRUE(testing::contains(forward_with(starts_from({0, 0, 2, 2, 1, 1})), "doc_starts[0, 4] = 1 is not a"));
  EXPECT_TRUE(testing::contains(forward_with(starts_from({0, 2, 2, 2, 2, 2})), "doc_starts[0, 1] = 2 is not a"));
  EXPECT_TRUE(testing::contains(forward_with(starts_from({0, 0, 0, 4, 4, 4})), "doc_starts[0, 3] = 4 is not a"));
  EXPECT_TRUE(testing::contains(forward_with(starts_from({-1, 0, 0, 0, 0, 0})), "doc_starts[0, 0] = -1"));
  EXPECT_TRUE(testing::contains(forward_with(starts_from({0, 0, 0})), "doc_starts"));  // (1, 3), not (1, 6)
  EXPECT_TRUE(testing::contains(forward_with(Tensor::zeros({1, 6})), "doc_starts"));   // f32, not i32
}

}  // namespace
}  // namespace tessera
