// Gradient buckets and ZeRO ownership: buckets tile the buffer from its end at parameter
// boundaries, and across dp ranks every element is owned exactly once.
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/dp/buckets.h"

namespace tessera {

TEST(Buckets, TileTheBufferFromTheEndAtParameterBoundaries) {
  std::vector<int64_t> starts = {0, 10, 13, 30, 31, 50};  // parameters of 10, 3, 17, 1, 19, 7 elements
  std::vector<Bucket> b = make_buckets(starts, 57, 15, 0, 1);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].begin, 31);  // 50..57 is 7 < 15, so it grows to 31..57
  EXPECT_EQ(b[0].end, 57);
  EXPECT_EQ(b[1].begin, 13);
  EXPECT_EQ(b[1].end, 31);
  EXPECT_EQ(b[2].begin, 0);  // the first bucket takes what is left
  EXPECT_EQ(b[2].end, 13);
  EXPECT_EQ(shard_size(b), 57);  // one rank owns everything
}

TEST(Buckets, EveryElementIsOwnedExactlyOnce) {
  std::vector<int64_t> starts = {0, 7, 20, 21, 40};
  for (int dp : {1, 2, 3, 4, 8}) {
    std::vector<int> owners(45, 0);
    int64_t total_shard = 0;
    for (int r = 0; r < dp; ++r) {
      std::vector<Bucket> buckets = make_buckets(starts, 45, 10, r, dp);
      int64_t offset = 0;
      for (const Bucket& b : buckets) {
        EXPECT_EQ(b.shard_offset, offset);
        EXPECT_EQ(b.chunk, (b.size() + dp - 1) / dp);
        offset += b.owned();
        for (int64_t i = b.owned_begin; i < b.owned_end; ++i) owners[size_t(i)]++;
      }
      total_shard += shard_size(buckets);
    }
    EXPECT_EQ(total_shard, 45) << "dp " << dp;
    for (int count : owners) EXPECT_EQ(count, 1) << "dp " << dp;
  }
}

TEST(Buckets, RejectBadSizes) {
  EXPECT_THROW(make_buckets({0, 5}, 10, 0, 0, 1), Error);
  EXPECT_THROW(make_buckets({3, 5}, 10, 4, 0, 1), Error);
}

}  // namespace tessera
