// TokenDataset: glob expansion in sorted order, reads across shard boundaries (v1 and v2 shards
// mixed, empty shards included), and errors naming the flag and the file for every bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/token_dataset.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using testing::contains;
using testing::error_of;

std::vector<uint32_t> range_tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> tokens(count);
  for (uint32_t i = 0; i < count; ++i) tokens[i] = first + i;
  return tokens;
}

TEST(TokenDataset, ConcatenatesShardsInSortedPathOrder) {
  fs::path dir = testing::scratch_dir();
  // Written out of order; glob order must be the sorted one: a (5), b (empty), c (7), d (3).
  write_token_shard(dir / "train_c.bin", range_tokens(105, 7), 2);
  write_token_shard(dir / "train_a.bin", range_tokens(100, 5), 1);
  write_token_shard(dir / "train_d.bin", range_tokens(112, 3), 1);
  write_token_shard(dir / "train_b.bin", {}, 2);
  write_token_shard(dir / "other.bin", range_tokens(0, 9), 1);  // not matched by the pattern
  TokenDataset data = TokenDataset::open((dir / "train_*.bin").string(), 1000, "--train-data");
  ASSERT_EQ(data.shards().size(), 4u);
  EXPECT_EQ(data.shards()[0].path(), dir / "train_a.bin");
  EXPECT_EQ(data.shards()[3].path(), dir / "train_d.bin");
  EXPECT_EQ(data.num_tokens(), 15);
  EXPECT_EQ(data.vocab_size(), 1000);
  EXPECT_EQ(data.flag_name(), "--train-data");
  std::vector<int32_t> all(15);
  data.read(0, 15, all.data());
  for (int32_t i = 0; i < 15; ++i) EXPECT_EQ(all[size_t(i)], 100 + i);
}

TEST(TokenDataset, EveryReadAcrossBoundariesMatchesTheStream) {
  fs::path dir = testing::scratch_dir();
  write_token_shard(dir / "s0.bin", range_tokens(0, 4), 1);
  write_token_shard(dir / "s1.bin", range_tokens(4, 1), 2);
  write_token_shard(dir / "s2.bin", {}, 1);
  write_token_shard(dir / "s3.bin", range_tokens(5, 6), 2);
  TokenDataset data = TokenDataset::open((dir / "s*.bin").string(), 11, "--train-data");
  ASSERT_EQ(data.num_tokens(), 11);
  for (int64_t start = 0; start <= 11; ++start) {
    for (int64_t count = 0; start + count <= 11; ++count) {
      std::vector<int32_t> out(size_t(count) + 1, -7);
      data.read(start, count, out.data());
      for (int64_t i = 0; i < count; ++i) EXPECT_EQ(out[size_t(i)], start + i) << start << "+" << count;
      EXPECT_EQ(out[size_t(count)], -7) << "wrote past the end";
    }
  }
}

TEST(TokenDataset, BraceAlternativesJoinInSortedOrderAndAFileMatchedTwiceIsRefused) {
  fs::path dir = testing::scratch_dir();
  fs::create_directories(dir / "web");
  fs::create_directories(dir / "code");
  fs::create_directories(dir / "math");
  write_token_shard(dir / "web" / "train_0.bin", range_tokens(0, 2), 1);
  write_token_shard(dir / "code" / "train_0.bin", range_tokens(2, 3), 1);
  write_token_shard(dir / "math" / "train_0.bin", range_tokens(9, 1), 1);  // not among the alternatives
  TokenDataset data = TokenDataset::open((dir / "{web,code}/train_*.bin").string(), 100, "--train-data");
  ASSERT_EQ(data.shards().size(), 2u);
  EXPECT_EQ(data.shards()[0].path(), dir / "code" / "train_0.bin");  // sorted, not in the braces' order
  EXPECT_EQ(data.shards()[1].path(), dir / "web" / "train_0.bin");
  EXPECT_EQ(data.num_tokens(), 5);

  const std::string twice = (dir / "{web,web}/train_*.bin").string();
  const std::string message = error_of([&] { TokenDataset::open(twice, 100, "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: '" + twice + "' matches " + (dir / "web" / "train_0.bin").string() +
                                    " twice"))
      << message;
}

TEST(TokenDataset, SingleFileWithoutWildcardsOpens) {
  fs::path path = testing::scratch_dir() / "val.bin";
  write_token_shard(path, range_tokens(3, 4), 1);
  TokenDataset data = TokenDataset::open(path.string(), 10, "--val-data");
  std::vector<int32_t> out(2);
  data.read(2, 2, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{5, 6}));
}

TEST(TokenDataset, RejectsPatternMatchingNothing) {
  fs::path dir = testing::scratch_dir();
  std::string pattern = (dir / "train_*.bin").string();
  std::string message = error_of([&] { TokenDataset::open(pattern, 100, "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: no file matches '" + pattern + "'")) << message;
  message = error_of([&] { TokenDataset::open("", 100, "--val-data"); });
  EXPECT_TRUE(contains(message, "--val-data: empty path")) << message;
}

TEST(TokenDataset, RejectsUnreadableMatches) {
  fs::path dir = testing::scratch_dir();
  write_token_shard(dir / "train_0.bin", range_tokens(0, 4), 1);
  fs::create_directory(dir / "train_1.bin");
  std::string message = error_of([&] { TokenDataset::open((dir / "train_*.bin").string(), 100, "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: shard '" + (dir / "train_1.bin").string() + "' is a directory, not a regular file"))
      << message;
  fs::remove(dir / "train_1.bin");
  fs::create_symlink(dir / "gone.bin", dir / "train_2.bin");  // glob(3) lists a dangling link
  message = error_of([&] { TokenDataset::open((dir / "train_*.bin").string(), 100, "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: shard '" + (dir / "train_2.bin").string() + "': no such file")) << message;
}

TEST(TokenDataset, RejectsBadShardNamingFlagAndFile) {
  fs::path dir = testing::scratch_dir();
  write_token_shard(dir / "train_0.bin", range_tokens(0, 4), 1);
  testing::write_text(dir / "train_1.bin", std::string(2000, 'z'));
  std::string message = error_of([&] { TokenDataset::open((dir / "train_*.bin").string(), 100, "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: shard " + (dir / "train_1.bin").string() + ": bad magic number"))
      << message;
}

TEST(TokenDataset, RejectsTokenIdsOutsideTheVocabulary) {
  fs::path dir = testing::scratch_dir();
  write_token_shard(dir / "a.bin", range_tokens(0, 3), 2);
  write_token_shard(dir / "b.bin", std::vector<uint32_t>{1, 2, 50257, 3}, 2);
  TokenDataset data = TokenDataset::open((dir / "*.bin").string(), 50257, "--train-data");
  std::vector<int32_t> out(7);
  data.read(0, 5, out.data());  // stops before the bad token
  EXPECT_EQ(out[4], 2);
  std::string message = error_of([&] { data.read(4, 2, out.data()); });
  EXPECT_TRUE(contains(message, "--train-data: shard " + (dir / "b.bin").string())) << message;
  EXPECT_TRUE(contains(message, "token id 50257 at position 2")) << message;
  EXPECT_TRUE(contains(message, "vocabulary size 50257")) << message;
  EXPECT_TRUE(contains(message, "larger vocabulary than the model's")) << message;
}

TEST(TokenDataset, RejectsReadsOutsideTheStreamAndBadVocabSize) {
  fs::path path = testing::scratch_dir() / "x.bin";
  write_token_shard(path, range_tokens(0, 5), 1);
  TokenDataset data = TokenDataset::open(path.string(), 10, "--train-data");
  std::vector<int32_t> out(8);
  EXPECT_TRUE(contains(error_of([&] { data.read(3, 3, out.data()); }), "outside the 5 tokens"));
  EXPECT_TRUE(contains(error_of([&] { data.read(-1, 1, out.data()); }), "--train-data"));
  EXPECT_TRUE(contains(error_of([&] { data.read(0, -1, out.data()); }), "--train-data"));
  data.read(5, 0, out.data());  // an empty read at the end is fine
  std::string message = error_of([&] { TokenDataset::open(path.string(), 0, "--train-data"); });
  EXPECT_TRUE(contains(message, "--train-data: the model's vocabulary size must be positive")) << message;
}

}  // namespace
}  // namespace tessera
