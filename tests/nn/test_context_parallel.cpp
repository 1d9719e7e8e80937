// The context-parallel layout (nn/context_parallel): each rank's positions as a table (rank i holds
// chunks i and 2·cp-1-i), the ranks together covering the sequence once, each rank's rows of a token
// batch, and sequence lengths or tensors that do not fit refused with the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/context_parallel.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using Positions = std::vector<int32_t>;

TEST(ContextParallel, PositionsFollowTheLoadBalancedChunks) {
  EXPECT_EQ(cp_positions(8, {0, 2}), (Positions{0, 1, 6, 7}));
  EXPECT_EQ(cp_positions(8, {1, 2}), (Positions{2, 3, 4, 5}));
  EXPECT_EQ(cp_positions(8, {0, 4}), (Positions{0, 7}));
  EXPECT_EQ(cp_positions(8, {3, 4}), (Positions{3, 4}));
  EXPECT_EQ(cp_positions(12, {1, 3}), (Positions{2, 3, 8, 9}));
  EXPECT_EQ(cp_positions(4, {0, 1}), (Positions{0, 1, 2, 3}));
}

TEST(ContextParallel, RanksCoverTheSequenceOnce) {
  for (int cp : {1, 2, 3, 4}) {
    const int64_t T = 8 * cp;
    Positions all;
    for (int r = 0; r < cp; r++) {
      const Positions mine = cp_positions(T, {r, cp});
      EXPECT_EQ(int64_t(mine.size()), T / cp);
      EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    Positions expected(static_cast<size_t>(T), 0);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(all, expected) << "cp=" << cp;
  }
}

TEST(ContextParallel, LocalTokensAreTheRanksRows) {
  Tensor tokens = Tensor::zeros({2, 8}, DType::i32);
  for (int64_t i = 0; i < 16; i++) tokens.data<int32_t>()[i] = int32_t(100 * (i / 8) + i % 8);
  const Tensor rank1 = cp_local_tokens(tokens, {1, 2});
  ASSERT_EQ(rank1.shape(), (Shape{2, 4}));
  ASSERT_EQ(rank1.dtype(), DType::i32);
  EXPECT_EQ(std::vector<int32_t>(rank1.data<int32_t>(), rank1.data<int32_t>() + 8),
            (std::vector<int32_t>{2, 3, 4, 5, 102, 103, 104, 105}));
  const Tensor rank0 = cp_local_tokens(tokens, {0, 2});
  EXPECT_EQ(std::vector<int32_t>(rank0.data<int32_t>(), rank0.data<int32_t>() + 8),
            (std::vector<int32_t>{0, 1, 6, 7, 100, 101, 106, 107}));
}

TEST(ContextParallel, LocalRowsKeepTheTrailingDims) {
  Tensor x = Tensor::zeros({1, 4, 3});
  for (int64_t i = 0; i < 12; i++) x.f32()[i] = float(i);
  const Tensor rank0 = cp_local_rows(x, {0, 2});  // positions 0 and 3
  ASSERT_EQ(rank0.shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(std::vector<float>(rank0.f32(), rank0.f32() + 6), (std::vector<float>{0, 1, 2, 9, 10, 11}));
}

TEST(ContextParallel, RefusesWhatDoesNotSplit) {
  const std::string message = testing::error_of([] { cp_positions(10, {0, 2}); });
  EXPECT_TRUE(testing::contains(message, "seq_len = 10")) << message;
  EXPECT_TRUE(testing::contains(message, "2·cp = 4")) << message;
  EXPECT_THROW(cp_positions(8, {2, 2}), Error);  // rank outside the group
  const Tensor floats = Tensor::zeros({2, 8});
  EXPECT_TRUE(testing::contains(testing::error_of([&] { cp_local_tokens(floats, {0, 2}); }), "(B, T) i32"));
  const Tensor odd = Tensor::zeros({2, 6}, DType::i32);
  EXPECT_THROW(cp_local_tokens(odd, {0, 2}), Error);
}

}  // namespace
}  // namespace tessera
