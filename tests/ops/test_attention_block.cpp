// Attention blocks: a causal sequence cut into position blocks (contiguous, and the load-balanced chunk
// order of context parallelism), merged block by block in either visiting order, gives attention_forward's
// out and lse, and the block backward gives attention_backward's dqkv; MHA and GQA, tiles of 64 rows
// crossed. A fully masked pair changes nothing; thread counts agree bitwise; bad positions and shapes
// are refused. Under document masks the blocks reproduce attention within each document.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_block.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::random_tensor;
using Positions = std::vector<int32_t>;

struct BlockShape {
  int64_t B, T, NH, NKV, HS;
  int64_t C() const { return NH * HS; }
  int64_t W() const { return (NH + 2 * NKV) * HS; }
};

// The positions of chunks `chunks` (in that order) of a sequence cut into chunks of `len` tokens.
Positions chunk_positions(const std::vector<int>& chunks, int64_t len) {
  Positions p;
  for (int c : chunks)
    for (int64_t t = c * len; t < (c + 1) * len; t++) p.push_back(int32_t(t));
  return p;
}

// The rows (B, positions, ...) of a (B, T, ...) f32 tensor.
Tensor rows_at(const Tensor& full, const Positions& positions) {
  const int64_t B = full.size(0), T = full.size(1), width = full.numel() / (B * T), n = int64_t(positions.size());
  Shape shape = full.shape();
  shape[1] = n;
  Tensor rows = Tensor::zeros(shape);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < n; t++)
      std::copy_n(full.f32() + (b * T + positions[size_t(t)]) * width, width, rows.f32() + (b * n + t) * width);
  return rows;
}

// Element (b, h, t) of an lse-shaped (B, NH, T) tensor at t = positions, as a flat expected vector.
std::vector<double> lse_at(const Tensor& lse, const Positions& positions) {
  const int64_t B = lse.size(0), NH = lse.size(1), T = lse.size(2);
  std::vector<double> v;
  for (int64_t bh = 0; bh < B * NH; bh++)
    for (int32_t p : positions) v.push_back(lse.f32()[bh * T + p]);
  return v;
}

std::vector<double> values(const Tensor& t) { return std::vector<double>(t.f32(), t.f32() + t.numel()); }

struct Reference {
  Tensor out, lse, dqkv;
};

Reference full_attention(const Tensor& qkv, const Tensor& dout, const BlockShape& s, const Tensor& doc_starts) {
  Reference r{Tensor::zeros({s.B, s.T, s.C()}), Tensor::zeros({s.B, s.NH, s.T}), Tensor::zeros(qkv.shape())};
  attention_forward(r.out, r.lse, qkv, int(s.NH), int(s.NKV), doc_starts);
  attention_backward(r.dqkv, dout, qkv, r.out, r.lse, int(s.NH), int(s.NKV), doc_starts);
  return r;
}

// Runs every (query block, kv block) pair, kv blocks in `order`, and checks out, lse and dqkv against
// causal attention over the whole sequence (within its documents, when doc_starts (B,T) is given).
void check_blocks_reproduce_attention(const BlockShape& s, const std::vector<Positions>& blocks,
                                      const std::vector<size_t>& order, const Tensor& doc_starts = {}) {
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 7), dout = random_tensor({s.B, s.T, s.C()}, 8);
  const Reference ref = full_attention(qkv, dout, s, doc_starts);
  std::vector<Tensor> q_blocks, kv_blocks, dkv_blocks;
  for (const Positions& p : blocks) {
    q_blocks.push_back(rows_at(qkv, p));
    kv_blocks.push_back(attention_block_kv(q_blocks.back(), int(s.NH), int(s.NKV)));
    dkv_blocks.push_back(Tensor::zeros(kv_blocks.back().shape()));
  }
  Tensor dqkv = Tensor::zeros(qkv.shape());
  for (size_t i = 0; i < blocks.size(); i++) {
    const int64_t n = int64_t(blocks[i].size());
    Tensor out = Tensor::zeros({s.B, n, s.C()}), lse = Tensor::zeros({s.B, s.NH, n});
    const Tensor starts = doc_starts.defined() ? testing::doc_starts_at(doc_starts, blocks[i]) : Tensor();
    for (size_t j : order)
      attention_block_forward(out, lse, q_blocks[i], kv_blocks[j], {blocks[i], blocks[j]}, int(s.NH), int(s.NKV),
                              j == order.front(), starts);
    testing::expect_close(out, values(rows_at(ref.out, blocks[i])), 1e-5, 1e-5, "out");
    testing::expect_close(lse, lse_at(ref.lse, blocks[i]), 1e-5, 1e-5, "lse");
    Tensor dout_i = rows_at(dout, blocks[i]), delta = Tensor::zeros(lse.shape());
    Tensor dqkv_i = Tensor::zeros(q_blocks[i].shape());
    attention_block_delta(delta, dout_i, out, int(s.NH));
    for (size_t j : order)
      attention_block_backward(dqkv_i, dkv_blocks[j], dout_i, q_blocks[i], kv_blocks[j], lse, delta,
                               {blocks[i], blocks[j]}, int(s.NH), int(s.NKV), starts);
    for (int64_t b = 0; b < s.B; b++)  // the q channels of the block's tokens
      for (int64_t t = 0; t < n; t++)
        std::copy_n(dqkv_i.f32() + (b * n + t) * s.W(), s.C(), dqkv.f32() + (b * s.T + blocks[i][size_t(t)]) * s.W());
  }
  for (size_t j = 0; j < blocks.size(); j++) {  // the k and v channels, summed over every query block
    Tensor dqkv_j = Tensor::zeros({s.B, int64_t(blocks[j].size()), s.W()});
    attention_block_kv_to_qkv(dqkv_j, dkv_blocks[j], int(s.NH), int(s.NKV));
    for (int64_t b = 0; b < s.B; b++)
      for (size_t t = 0; t < blocks[j].size(); t++) {
        const float* from = dqkv_j.f32() + (b * int64_t(blocks[j].size()) + int64_t(t)) * s.W();
        std::copy(from + s.C(), from + s.W(), dqkv.f32() + (b * s.T + blocks[j][t]) * s.W() + s.C());
      }
  }
  testing::expect_close(dqkv, values(ref.dqkv), 1e-5, 1e-5, "dqkv");
}

// Contiguous blocks, and the load-balanced layouts of cp = 2 and cp = 3 (rank i: chunks i, 2cp-1-i),
// each visited forwards and backwards (so a first block may hide every key from some rows).
void check_partitions(const BlockShape& s, const Tensor& doc_starts = {}) {
  SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV);
  const int64_t third = s.T / 3, quarter = s.T / 4, sixth = s.T / 6;
  const std::vector<std::vector<Positions>> partitions = {
      {chunk_positions({0}, third), chunk_positions({1}, third), chunk_positions({2}, third)},
      {chunk_positions({0, 3}, quarter), chunk_positions({1, 2}, quarter)},
      {chunk_positions({0, 5}, sixth), chunk_positions({1, 4}, sixth), chunk_positions({2, 3}, sixth)}};
  for (const std::vector<Positions>& blocks : partitions) {
    std::vector<size_t> order(blocks.size());
    std::iota(order.begin(), order.end(), 0);
    check_blocks_reproduce_attention(s, blocks, order, doc_starts);
    std::reverse(order.begin(), order.end());
    check_blocks_reproduce_attention(s, blocks, order, doc_starts);
  }
}

TEST(AttentionBlock, BlocksReproduceCausalAttentionMultiHead) {
  check_partitions({2, 24, 2, 2, 4});
  check_partitions({1, 192, 2, 2, 8});  // blocks of 64 and 96 rows: full and partial query tiles
}

TEST(AttentionBlock, BlocksReproduceCausalAttentionGroupedQuery) {
  check_partitions({2, 24, 4, 2, 4});
  check_partitions({1, 156, 4, 2, 4});
}

// Documents that begin mid-block, span blocks and are a token long: some query rows see no key of some
// blocks, and a tile's rows start from different keys.
TEST(AttentionBlock, BlocksReproduceDocumentMaskedAttention) {
  check_partitions({2, 24, 2, 2, 4}, testing::doc_starts_of_lengths(24, {{5, 1, 7, 11}, {6, 1, 7, 10}}));
  check_partitions({1, 192, 4, 2, 8}, testing::doc_starts_of_lengths(192, {{40, 1, 59, 70, 22}}));
}

TEST(AttentionBlock, FullyMaskedPairChangesNothing) {
  const BlockShape s{2, 16, 4, 2, 4};
  const Positions early = chunk_positions({0}, 8), late = chunk_positions({1}, 8);
  const Tensor qkv = random_tensor({s.B, 8, s.W()}, 21), dout = random_tensor({s.B, 8, s.C()}, 22);
  const Tensor kv = attention_block_kv(random_tensor({s.B, 8, s.W()}, 23), int(s.NH), int(s.NKV));
  Tensor out = random_tensor({s.B, 8, s.C()}, 24), lse = random_tensor({s.B, s.NH, 8}, 25);
  const Tensor out_before = testing::copy_of(out), lse_before = testing::copy_of(lse);
  attention_block_forward(out, lse, qkv, kv, {early, late}, int(s.NH), int(s.NKV), false);
  testing::expect_identical(out, out_before, "out");
  testing::expect_identical(lse, lse_before, "lse");

  Tensor dqkv = random_tensor(qkv.shape(), 26), dkv = random_tensor(kv.shape(), 27), delta = testing::copy_of(lse);
  const Tensor dqkv_before = testing::copy_of(dqkv), dkv_before = testing::copy_of(dkv);
  attention_block_backward(dqkv, dkv, dout, qkv, kv, lse, delta, {early, late}, int(s.NH), int(s.NKV));
  testing::expect_identical(dqkv, dqkv_before, "dqkv");
  testing::expect_identical(dkv, dkv_before, "dkv");

  attention_block_forward(out, lse, qkv, kv, {early, late}, int(s.NH), int(s.NKV), true);  // initialises
  for (int64_t i = 0; i < out.numel(); i++) ASSERT_EQ(out.f32()[i], 0.0f) << i;
  for (int64_t i = 0; i < lse.numel(); i++) ASSERT_EQ(lse.f32()[i], -INFINITY) << i;
}

TEST(AttentionBlock, OneThreadAndSeveralAgree) {
  const BlockShape s{2, 160, 4, 2, 8};
  const Positions q = chunk_positions({1, 2}, 40), k = chunk_positions({0, 3}, 40);
  const Tensor qkv = random_tensor({s.B, 80, s.W()}, 31), dout = random_tensor({s.B, 80, s.C()}, 32);
  const Tensor kv = attention_block_kv(random_tensor({s.B, 80, s.W()}, 33), int(s.NH), int(s.NKV));
  Tensor out[2], lse[2], dqkv[2], dkv[2];
  for (int run = 0; run < 2; run++) {
    out[run] = Tensor::zeros({s.B, 80, s.C()});
    lse[run] = Tensor::zeros({s.B, s.NH, 80});
    dqkv[run] = Tensor::zeros(qkv.shape());
    dkv[run] = Tensor::zeros(kv.shape());
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      attention_block_forward(out[run], lse[run], qkv, kv, {q, k}, int(s.NH), int(s.NKV), true);
      Tensor delta = Tensor::zeros(lse[run].shape());
      attention_block_delta(delta, dout, out[run], int(s.NH));
      attention_block_backward(dqkv[run], dkv[run], dout, qkv, kv, lse[run], delta, {q, k}, int(s.NH), int(s.NKV));
    });
  }
  testing::expect_identical(out[0], out[1], "out");
  testing::expect_identical(lse[0], lse[1], "lse");
  testing::expect_identical(dqkv[0], dqkv[1], "dqkv");
  testing::expect_identical(dkv[0], dkv[1], "dkv");
}

TEST(AttentionBlock, KvChannelsRoundTrip) {
  const BlockShape s{2, 3, 4, 2, 2};  // W = 16: q 8 channels, then k 4, v 4
  const Tensor qkv = random_tensor({s.B, s.T, s.W()}, 41);
  const Tensor kv = attention_block_kv(qkv, int(s.NH), int(s.NKV));
  ASSERT_EQ(kv.shape(), (Shape{2, 3, 8}));
  for (int64_t row = 0; row < s.B * s.T; row++)
    for (int64_t c = 0; c < 8; c++) ASSERT_EQ(kv.f32()[row * 8 + c], qkv.f32()[row * 16 + 8 + c]);
  Tensor back = Tensor::zeros(qkv.shape());
  testing::fill(back, 5.0f);
  attention_block_kv_to_qkv(back, kv, int(s.NH), int(s.NKV));
  for (int64_t row = 0; row < s.B * s.T; row++)
    for (int64_t c = 0; c < 16; c++) ASSERT_EQ(back.f32()[row * 16 + c], c < 8 ? 5.0f : qkv.f32()[row * 16 + c]);
}

TEST(AttentionBlock, RejectsBadPositionsAndShapes) {
  const Tensor qkv = random_tensor({1, 4, 12}, 51);  // NH = NKV = 2, HS = 2
  const Tensor kv = attention_block_kv(qkv, 2, 2);
  Tensor out = Tensor::zeros({1, 4, 4}), lse = Tensor::zeros({1, 2, 4});
  const Positions good = {0, 1, 2, 3}, unsorted = {0, 2, 1, 3}, repeated = {0, 1, 1, 3}, short_ = {0, 1, 2};
  attention_block_forward(out, lse, qkv, kv, {good, good}, 2, 2, true);  // the good call
  const auto forward = [&](const Positions& q, const Positions& k) {
    return testing::error_of([&] { attention_block_forward(out, lse, qkv, kv, {q, k}, 2, 2, true); });
  };
  EXPECT_TRUE(testing::contains(forward(unsorted, good), "positions.q positions must be strictly increasing"));
  EXPECT_TRUE(testing::contains(forward(good, repeated), "positions.kv positions must be strictly increasing"));
  EXPECT_TRUE(testing::contains(forward(short_, good), "positions.q holds 3 positions for 4 tokens"));
  const Tensor wide_kv = Tensor::zeros({1, 4, 12});
  EXPECT_TRUE(testing::contains(
      testing::error_of([&] { attention_block_forward(out, lse, qkv, wide_kv, {good, good}, 2, 2, true); }),
      "kv has shape (1, 4, 12) but must be (1, Tk, 8)"));
  Tensor dqkv = Tensor::zeros(qkv.shape()), dkv = Tensor::zeros({1, 3, 8}), delta = Tensor::zeros(lse.shape());
  EXPECT_THROW(attention_block_backward(dqkv, dkv, out, qkv, kv, lse, delta, {good, good}, 2, 2), Error);
  Tensor wrong_delta = Tensor::zeros({1, 4, 2});
  EXPECT_THROW(attention_block_delta(wrong_delta, out, out, 2), Error);
}

}  // namespace
}  // namespace tessera
