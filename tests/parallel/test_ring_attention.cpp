// Ring attention over the world as the cp group: every rank draws the same full qkv and dout, takes its
// load-balanced chunks, and its out, lse and dqkv equal causal attention over the whole sequence sliced
// to those chunks; MHA and GQA, local sequences over and under a 64-row query tile; within documents under
// document masks too. The bytes sent are
// the ring's, cp = 1 (a group of one) sends none, and a sequence that does not split into 2·cp chunks is
// refused naming both numbers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm_testing.h"
#include "ops/attention.h"
#include "ops/op_testing.h"
#include "parallel/cp/ring_attention.h"

namespace tessera::testing {
namespace {

struct RingShape {
  int64_t B, T, NH, NKV, HS;  // T: the whole sequence
  int64_t C() const { return NH * HS; }
  int64_t W() const { return (NH + 2 * NKV) * HS; }
};

std::vector<double> values(const Tensor& t) { return std::vector<double>(t.f32(), t.f32() + t.numel()); }

// lse (B, NH, T) at the rank's positions: the expected local lse, flat.
std::vector<double> lse_at(const Tensor& lse, const std::vector<int32_t>& positions) {
  std::vector<double> v;
  for (int64_t bh = 0; bh < lse.size(0) * lse.size(1); bh++)
    for (int32_t p : positions) v.push_back(lse.f32()[bh * lse.size(2) + p]);
  return v;
}

// Ring attention of this rank's chunks against attention over the whole sequence (within documents
// when doc_starts (B,T) is given); returns the ring's stats after forward and after backward.
std::pair<RingStats, RingStats> check_ring_matches_full_attention(const RingShape& s, std::shared_ptr<Comm> cp,
                                                                  const Tensor& doc_starts = {}) {
  SCOPED_TRACE(::testing::Message() << "cp=" << cp->size() << " B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                    << " NKV=" << s.NKV << " HS=" << s.HS);
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 101), dout = random_tensor({s.B, s.T, s.C()}, 102);
  Tensor out = Tensor::zeros({s.B, s.T, s.C()}), lse = Tensor::zeros({s.B, s.NH, s.T});
  Tensor dqkv = Tensor::zeros(qkv.shape());
  attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), doc_starts);
  attention_backward(dqkv, dout, qkv, out, lse, int(s.NH), int(s.NKV), doc_starts);

  RingAttention ring(cp);
  const CpPlace place = ring.place();
  const Tensor local_starts = doc_starts.defined() ? cp_local_tokens(doc_starts, place) : Tensor();
  const int64_t local_T = s.T / place.size;
  const Tensor local_qkv = cp_local_rows(qkv, place), local_dout = cp_local_rows(dout, place);
  Tensor local_out = Tensor::zeros({s.B, local_T, s.C()}), local_lse = Tensor::zeros({s.B, s.NH, local_T});
  ring.attention_forward(local_out, local_lse, local_qkv, int(s.NH), int(s.NKV), local_starts);
  const RingStats forward = ring.stats();
  expect_close(local_out, values(cp_local_rows(out, place)), 1e-5, 1e-5, "out");
  expect_close(local_lse, lse_at(lse, cp_positions(s.T, place)), 1e-5, 1e-5, "lse");

  Tensor local_dqkv = Tensor::zeros(local_qkv.shape());
  fill(local_dqkv, kNaN);  // written, not accumulated
  ring.reset_stats();
  ring.attention_backward(local_dqkv, local_dout, local_qkv, local_out, local_lse, int(s.NH), int(s.NKV),
                          local_starts);
  expect_close(local_dqkv, values(cp_local_rows(dqkv, place)), 1e-5, 1e-5, "dqkv");
  return {forward, ring.stats()};
}

// The bytes of one rank's [k | v] block.
int64_t kv_block_bytes(const RingShape& s, int cp) { return s.B * (s.T / cp) * 2 * s.NKV * s.HS * 4; }

const RingShape kShapes[] = {{2, 40, 2, 2, 8}, {2, 40, 4, 2, 4}, {1, 176, 2, 2, 8}, {1, 176, 4, 1, 8}};

TEST(RingAttention, MatchesCausalAttentionOverTheWholeSequence) {
  auto cp = world_comm("cp");
  const int n = cp->size();
  for (const RingShape& s : kShapes) {
    const auto [forward, backward] = check_ring_matches_full_attention(s, cp);
    // Forward passes each block n-1 hops; backward the blocks again and n hops of their accumulators.
    EXPECT_EQ(forward.bytes_sent, (n - 1) * kv_block_bytes(s, n));
    EXPECT_EQ(backward.bytes_sent, (2 * n - 1) * kv_block_bytes(s, n));
    EXPECT_GE(forward.wait_s, 0.0);
    EXPECT_GE(backward.wait_s, 0.0);
  }
}

// Documents of a packed window: a document starting mid-chunk, one spanning chunks (so some ranks'
// rows see no key of some blocks), one-token documents, and a window that is one document.
TEST(RingAttention, MatchesDocumentMaskedAttention) {
  auto cp = world_comm("cp");
  for (const RingShape& s : kShapes) {
    const int32_t T = int32_t(s.T), a = T / 8 + 1, c = T / 2 + 3 - (a + 1);  // documents begin at 0, a, a+1, T/2+3, T-1
    const std::vector<int32_t> lengths = {a, 1, c, T - 1 - (a + 1 + c), 1};
    check_ring_matches_full_attention(s, cp, doc_starts_of_lengths(s.T, DocumentLengths(size_t(s.B), lengths)));
  }
}

TEST(RingAttention, OneRankGroupSendsNothing) {
  auto alone = split_comm("cp1", world_rank());
  ASSERT_EQ(alone->size(), 1);
  for (const RingShape& s : kShapes) {
    const auto [forward, backward] = check_ring_matches_full_attention(s, alone);
    EXPECT_EQ(forward.bytes_sent, 0);
    EXPECT_EQ(backward.bytes_sent, 0);
  }
}

TEST(RingAttention, RefusesASequenceNotSplittingIntoTwoChunksPerRank) {
  auto cp = world_comm("cp");
  const int n = cp->size();
  const RingShape s{1, 5 * n, 2, 2, 4};  // local sequences of 5 tokens: 5·cp is never a multiple of 2·cp
  RingAttention ring(cp);
  const Tensor qkv = random_tensor({s.B, 5, s.W()}, 111);
  Tensor out = Tensor::zeros({s.B, 5, s.C()}), lse = Tensor::zeros({s.B, s.NH, 5});
  const std::string message = error_of([&] { ring.attention_forward(out, lse, qkv, int(s.NH), int(s.NKV), {}); });
  EXPECT_TRUE(contains(message, "seq_len = " + std::to_string(5 * n))) << message;
  EXPECT_TRUE(contains(message, "2·cp = " + std::to_string(2 * n))) << message;
  Tensor dqkv = Tensor::zeros(qkv.shape());
  EXPECT_THROW(ring.attention_backward(dqkv, out, qkv, out, lse, int(s.NH), int(s.NKV), {}), Error);
  EXPECT_EQ(ring.stats().bytes_sent, 0);
}

}  // namespace
}  // namespace tessera::testing
