// Context-parallel attention over the world as the cp group, ring and all-to-all alike: every rank
// draws the same full qkv and dout, takes its load-balanced chunks, and its out, lse and dqkv equal
// causal attention over the whole sequence sliced to those chunks; MHA and GQA, local sequences over
// and under a 64-row query tile; within documents under document masks, and with Gemma 2's soft-capped
// scores, too. The bytes sent are each
// kind's exchanges, cp = 1 (a group of one) sends none, a sequence that does not split into 2·cp
// chunks is refused naming both numbers, and all-to-all refuses heads that cp does not divide.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm_testing.h"
#include "ops/attention.h"
#include "ops/op_testing.h"
#include "parallel/cp/all_to_all_attention.h"
#include "parallel/cp/ring_attention.h"

namespace tessera::testing {
namespace {

enum class Kind { ring, all_to_all };

std::unique_ptr<ContextParallel> make_attention(Kind kind, std::shared_ptr<Comm> cp) {
  if (kind == Kind::ring) return std::make_unique<RingAttention>(std::move(cp));
  return std::make_unique<AllToAllAttention>(std::move(cp));
}

struct CpShape {
  int64_t B, T, NH, NKV, HS;  // T: the whole sequence
  int64_t C() const { return NH * HS; }
  int64_t W() const { return (NH + 2 * NKV) * HS; }
  // Whether `kind` over `cp` ranks takes these heads (all-to-all shares them out evenly).
  bool fits(Kind kind, int cp) const { return kind == Kind::ring || (NH % cp == 0 && NKV % cp == 0); }
};

std::vector<double> values(const Tensor& t) { return std::vector<double>(t.f32(), t.f32() + t.numel()); }

// lse (B, NH, T) at the rank's positions: the expected local lse, flat.
std::vector<double> lse_at(const Tensor& lse, const std::vector<int32_t>& positions) {
  std::vector<double> v;
  for (int64_t bh = 0; bh < lse.size(0) * lse.size(1); bh++)
    for (int32_t p : positions) v.push_back(lse.f32()[bh * lse.size(2) + p]);
  return v;
}

// `kind` over this rank's chunks against attention over the whole sequence (within documents when
// doc_starts (B,T) is given, its scores capped at softcap when > 0); returns its stats after forward and
// after backward.
std::pair<CpCommStats, CpCommStats> check_matches_full_attention(Kind kind, const CpShape& s,
                                                                 std::shared_ptr<Comm> cp,
                                                                 const Tensor& doc_starts = {},
                                                                 float softcap = 0.0f) {
  SCOPED_TRACE(::testing::Message() << "cp=" << cp->size() << " B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                    << " NKV=" << s.NKV << " HS=" << s.HS);
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 101), dout = random_tensor({s.B, s.T, s.C()}, 102);
  Tensor out = Tensor::zeros({s.B, s.T, s.C()}), lse = Tensor::zeros({s.B, s.NH, s.T});
  Tensor dqkv = Tensor::zeros(qkv.shape());
  attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), doc_starts, softcap);
  attention_backward(dqkv, dout, qkv, out, lse, int(s.NH), int(s.NKV), doc_starts, softcap);

  const std::unique_ptr<ContextParallel> attention = make_attention(kind, cp);
  const CpPlace place = attention->place();
  const Tensor local_starts = doc_starts.defined() ? cp_local_tokens(doc_starts, place) : Tensor();
  const int64_t local_T = s.T / place.size;
  const Tensor local_qkv = cp_local_rows(qkv, place), local_dout = cp_local_rows(dout, place);
  Tensor local_out = Tensor::zeros({s.B, local_T, s.C()}), local_lse = Tensor::zeros({s.B, s.NH, local_T});
  attention->attention_forward(local_out, local_lse, local_qkv, int(s.NH), int(s.NKV), local_starts, softcap);
  const CpCommStats forward = attention->stats();
  expect_close(local_out, values(cp_local_rows(out, place)), 1e-5, 1e-5, "out");
  expect_close(local_lse, lse_at(lse, cp_positions(s.T, place)), 1e-5, 1e-5, "lse");

  Tensor local_dqkv = Tensor::zeros(local_qkv.shape());
  fill(local_dqkv, kNaN);  // written, not accumulated
  attention->reset_stats();
  attention->attention_backward(local_dqkv, local_dout, local_qkv, local_out, local_lse, int(s.NH), int(s.NKV),
                                local_starts, softcap);
  expect_close(local_dqkv, values(cp_local_rows(dqkv, place)), 1e-5, 1e-5, "dqkv");
  return {forward, attention->stats()};
}

// The bytes of one rank's local tensors: the [k | v] block, and qkv, out and lse.
int64_t kv_block_bytes(const CpShape& s, int cp) { return s.B * (s.T / cp) * 2 * s.NKV * s.HS * 4; }
int64_t qkv_bytes(const CpShape& s, int cp) { return s.B * (s.T / cp) * s.W() * 4; }
int64_t out_bytes(const CpShape& s, int cp) { return s.B * (s.T / cp) * s.C() * 4; }
int64_t lse_bytes(const CpShape& s, int cp) { return s.B * s.NH * (s.T / cp) * 4; }

const CpShape kShapes[] = {{2, 40, 2, 2, 8}, {2, 40, 4, 2, 4}, {1, 176, 2, 2, 8}, {1, 176, 4, 1, 8}, {2, 48, 8, 4, 4}};

class CpAttention : public ::testing::TestWithParam<Kind> {};

TEST_P(CpAttention, MatchesCausalAttentionOverTheWholeSequence) {
  auto cp = world_comm("cp");
  const int n = cp->size();
  for (const CpShape& s : kShapes) {
    if (!s.fits(GetParam(), n)) continue;
    const auto [forward, backward] = check_matches_full_attention(GetParam(), s, cp);
    if (GetParam() == Kind::ring) {
      // Forward passes each block n-1 hops; backward the blocks again and n hops of their accumulators.
      EXPECT_EQ(forward.bytes_sent, (n - 1) * kv_block_bytes(s, n));
      EXPECT_EQ(backward.bytes_sent, (2 * n - 1) * kv_block_bytes(s, n));
    } else {
      // Each exchange sends all but this rank's own 1/n: forward qkv there, out and lse back; backward
      // qkv, out, dout and lse there, dqkv back.
      EXPECT_EQ(forward.bytes_sent, (qkv_bytes(s, n) + out_bytes(s, n) + lse_bytes(s, n)) / n * (n - 1));
      EXPECT_EQ(backward.bytes_sent, (2 * qkv_bytes(s, n) + 2 * out_bytes(s, n) + lse_bytes(s, n)) / n * (n - 1));
    }
    EXPECT_GE(forward.wait_s, 0.0);
    EXPECT_GE(backward.wait_s, 0.0);
  }
}

// Documents of a packed window: a document starting mid-chunk, one spanning chunks (so some ranks'
// rows see no key of some blocks), one-token documents, and a window that is one document.
TEST_P(CpAttention, MatchesDocumentMaskedAttention) {
  auto cp = world_comm("cp");
  for (const CpShape& s : kShapes) {
    if (!s.fits(GetParam(), cp->size())) continue;
    const int32_t T = int32_t(s.T), a = T / 8 + 1, c = T / 2 + 3 - (a + 1);  // documents begin at 0, a, a+1, T/2+3, T-1
    const std::vector<int32_t> lengths = {a, 1, c, T - 1 - (a + 1 + c), 1};
    check_matches_full_attention(GetParam(), s, cp, doc_starts_of_lengths(s.T, DocumentLengths(size_t(s.B), lengths)));
  }
}

// Gemma 2's soft-capped scores, at a cap that bends them (these draws' scores spread over about +-1), with
// and without documents.
TEST_P(CpAttention, MatchesSoftCappedAttention) {
  auto cp = world_comm("cp");
  for (const CpShape& s : kShapes) {
    if (!s.fits(GetParam(), cp->size())) continue;
    check_matches_full_attention(GetParam(), s, cp, {}, 0.7f);
    const int32_t T = int32_t(s.T);
    check_matches_full_attention(GetParam(), s, cp,
                                 doc_starts_of_lengths(s.T, DocumentLengths(size_t(s.B), {T / 3, T - T / 3})), 0.7f);
  }
}

TEST_P(CpAttention, OneRankGroupSendsNothing) {
  auto alone = split_comm("cp1", world_rank());
  ASSERT_EQ(alone->size(), 1);
  for (const CpShape& s : kShapes) {
    const auto [forward, backward] = check_matches_full_attention(GetParam(), s, alone);
    EXPECT_EQ(forward.bytes_sent, 0);
    EXPECT_EQ(backward.bytes_sent, 0);
  }
}

TEST_P(CpAttention, RefusesASequenceNotSplittingIntoTwoChunksPerRank) {
  auto cp = world_comm("cp");
  const int n = cp->size();
  const CpShape s{1, 5 * n, 2 * n, 2 * n, 4};  // local sequences of 5 tokens: 5·cp is never a multiple of 2·cp
  const std::unique_ptr<ContextParallel> attention = make_attention(GetParam(), cp);
  const Tensor qkv = random_tensor({s.B, 5, s.W()}, 111);
  Tensor out = Tensor::zeros({s.B, 5, s.C()}), lse = Tensor::zeros({s.B, s.NH, 5});
  const std::string message =
      error_of([&] { attention->attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), {}, 0.0f); });
  EXPECT_TRUE(contains(message, "seq_len = " + std::to_string(5 * n))) << message;
  EXPECT_TRUE(contains(message, "2·cp = " + std::to_string(2 * n))) << message;
  Tensor dqkv = Tensor::zeros(qkv.shape());
  EXPECT_THROW(attention->attention_backward(dqkv, out, qkv, out, lse, int(s.NH), int(s.NKV), {}, 0.0f), Error);
  EXPECT_EQ(attention->stats().bytes_sent, 0);
}

TEST(AllToAllAttention, RefusesHeadsTheGroupDoesNotDivide) {
  auto cp = world_comm("cp");
  const int n = cp->size();
  const CpShape s{1, 4 * n, 2 * n, 1, 4};  // one kv head for n ranks
  AllToAllAttention attention(cp);
  const Tensor qkv = random_tensor({s.B, 4, s.W()}, 112);
  Tensor out = Tensor::zeros({s.B, 4, s.C()}), lse = Tensor::zeros({s.B, s.NH, 4});
  const std::string message = error_of([&] { attention.attention_forward(out, lse, qkv, int(s.NH), 1, {}, 0.0f); });
  EXPECT_TRUE(contains(message, std::to_string(2 * n) + " query and 1 key/value heads")) << message;
  EXPECT_TRUE(contains(message, "--cp-comm ring")) << message;
  EXPECT_EQ(attention.stats().bytes_sent, 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, CpAttention, ::testing::Values(Kind::ring, Kind::all_to_all),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::ring ? "Ring" : "AllToAll";
                         });

}  // namespace
}  // namespace tessera::testing
