// Token shards: v1/v2 round trips through write_token_shard and the mmap reader, atomic writes,
// and a one-line error naming the file for every malformed shard.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/token_shard.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

using testing::contains;
using testing::error_of;

// A file holding the llm.c header (magic, version, count; the rest zero) followed by raw payload bytes.
void write_raw_shard(const fs::path& path, int32_t magic, int32_t version, int32_t count, size_t payload_bytes) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  std::string payload(payload_bytes, '\x01');
  out.write(payload.data(), std::streamsize(payload.size()));
}

TEST(TokenShard, RoundTripsVersion1) {
  fs::path path = testing::scratch_dir() / "v1.bin";
  std::vector<uint32_t> tokens = {0, 1, 50256, 65535, 7, 300};
  write_token_shard(path, tokens, 1);
  EXPECT_EQ(fs::file_size(path), 1024u + 2 * tokens.size());
  TokenShard shard(path);
  EXPECT_EQ(shard.version(), 1);
  ASSERT_EQ(shard.num_tokens(), 6);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(shard.token(int64_t(i)), tokens[i]) << i;
  EXPECT_EQ(shard.path(), path);
}

TEST(TokenShard, RoundTripsVersion2) {
  fs::path path = testing::scratch_dir() / "v2.bin";
  std::vector<uint32_t> tokens = {65536, 0, 128255, 4294967295u, 42};
  write_token_shard(path, tokens, 2);
  EXPECT_EQ(fs::file_size(path), 1024u + 4 * tokens.size());
  TokenShard shard(path);
  EXPECT_EQ(shard.version(), 2);
  ASSERT_EQ(shard.num_tokens(), 5);
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(shard.token(int64_t(i)), tokens[i]) << i;
}

TEST(TokenShard, HeaderMatchesLlmcLayout) {
  fs::path path = testing::scratch_dir() / "layout.bin";
  write_token_shard(path, std::vector<uint32_t>{258, 3}, 1);
  std::string bytes = testing::read_text(path);
  ASSERT_EQ(bytes.size(), 1028u);
  std::vector<int32_t> header(256);
  std::memcpy(header.data(), bytes.data(), 1024);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 2);
  EXPECT_EQ(header[3], 0);
  EXPECT_EQ(static_cast<unsigned char>(bytes[1024]), 2);  // 258 little-endian
  EXPECT_EQ(static_cast<unsigned char>(bytes[1025]), 1);
  EXPECT_EQ(static_cast<unsigned char>(bytes[1026]), 3);
}

TEST(TokenShard, EmptyShardHasNoTokens) {
  fs::path path = testing::scratch_dir() / "empty.bin";
  write_token_shard(path, {}, 2);
  TokenShard shard(path);
  EXPECT_EQ(shard.num_tokens(), 0);
  EXPECT_TRUE(contains(error_of([&] { shard.token(0); }), path.string()));
}

// llm.c requires the exact size: tokens past the header's count are refused, not silently ignored.
TEST(TokenShard, RejectsTokensPastTheHeadersCount) {
  fs::path path = testing::scratch_dir() / "trailing.bin";
  write_raw_shard(path, 20240520, 2, 3, 4 * 5);
  std::string message = error_of([&] { TokenShard shard(path); });
  EXPECT_TRUE(contains(message, "shard " + path.string() + ": header says 3 tokens but the file holds 5; ")) << message;
  EXPECT_TRUE(contains(message, "re-create it (tessera tokenize)")) << message;
  write_raw_shard(path, 20240520, 2, 3, 4 * 3 + 1);  // a stray byte
  message = error_of([&] { TokenShard shard(path); });
  EXPECT_TRUE(contains(message, "header says 3 tokens but the file holds 3 and a partial one")) << message;
}

TEST(TokenShard, WriteReplacesAtomicallyAndLeavesNoTemporary) {
  fs::path dir = testing::scratch_dir();
  fs::path path = dir / "shard.bin";
  write_token_shard(path, std::vector<uint32_t>{1, 2, 3}, 1);
  write_token_shard(path, std::vector<uint32_t>{9, 8}, 2);
  TokenShard shard(path);
  EXPECT_EQ(shard.version(), 2);
  ASSERT_EQ(shard.num_tokens(), 2);
  EXPECT_EQ(shard.token(0), 9u);
  EXPECT_EQ(shard.token(1), 8u);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.path() != path;
  EXPECT_EQ(files, 0);
}

TEST(TokenShard, MovesOwnership) {
  fs::path path = testing::scratch_dir() / "move.bin";
  write_token_shard(path, std::vector<uint32_t>{5, 6, 7}, 1);
  TokenShard a(path);
  TokenShard b(std::move(a));
  EXPECT_EQ(b.num_tokens(), 3);
  EXPECT_EQ(b.token(2), 7u);
  EXPECT_EQ(a.num_tokens(), 0);  // the moved-from shard is empty
  std::vector<TokenShard> shards;
  shards.push_back(std::move(b));
  shards.emplace_back(path);
  TokenShard c = std::move(shards[0]);
  c = std::move(shards[1]);
  EXPECT_EQ(c.token(0), 5u);
}

TEST(TokenShard, Version1RejectsTokensAbove65535) {
  fs::path path = testing::scratch_dir() / "big.bin";
  std::string message = error_of([&] { write_token_shard(path, std::vector<uint32_t>{1, 65536}, 1); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  EXPECT_TRUE(contains(message, "65536 at position 1")) << message;
  EXPECT_TRUE(contains(message, "version 2")) << message;
  EXPECT_FALSE(fs::exists(path));
}

TEST(TokenShard, WriteRejectsUnknownVersionAndMissingDirectory) {
  fs::path dir = testing::scratch_dir();
  std::string message = error_of([&] { write_token_shard(dir / "v3.bin", std::vector<uint32_t>{1}, 3); });
  EXPECT_TRUE(contains(message, "v3.bin")) << message;
  EXPECT_TRUE(contains(message, "got 3")) << message;
  message = error_of([&] { write_token_shard(dir / "no" / "such.bin", std::vector<uint32_t>{1}, 2); });
  EXPECT_TRUE(contains(message, "such.bin")) << message;
  EXPECT_TRUE(contains(message, "cannot create")) << message;
}

TEST(TokenShard, RejectsWrongMagic) {
  fs::path path = testing::scratch_dir() / "magic.bin";
  write_raw_shard(path, 20240521, 1, 2, 4);
  std::string message = error_of([&] { TokenShard shard(path); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  EXPECT_TRUE(contains(message, "bad magic number 20240521")) << message;
}

TEST(TokenShard, RejectsUnknownVersion) {
  fs::path path = testing::scratch_dir() / "version.bin";
  write_raw_shard(path, 20240520, 3, 2, 8);
  std::string message = error_of([&] { TokenShard shard(path); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  EXPECT_TRUE(contains(message, "unsupported version 3")) << message;
}

TEST(TokenShard, RejectsShardShorterThanItsHeaderSays) {
  fs::path path = testing::scratch_dir() / "short.bin";
  write_raw_shard(path, 20240520, 1, 10, 9);  // 4 whole uint16 tokens and a stray byte
  std::string message = error_of([&] { TokenShard shard(path); });
  EXPECT_TRUE(contains(message, "shard " + path.string() + ": header says 10 tokens but the file holds only 4"))
      << message;
}

TEST(TokenShard, RejectsNegativeTokenCount) {
  fs::path path = testing::scratch_dir() / "negative.bin";
  write_raw_shard(path, 20240520, 2, -1, 0);
  std::string message = error_of([&] { TokenShard shard(path); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  EXPECT_TRUE(contains(message, "negative token count")) << message;
}

TEST(TokenShard, RejectsFileSmallerThanTheHeader) {
  fs::path path = testing::scratch_dir() / "tiny.bin";
  testing::write_text(path, std::string(100, 'x'));
  std::string message = error_of([&] { TokenShard shard(path); });
  EXPECT_TRUE(contains(message, path.string())) << message;
  EXPECT_TRUE(contains(message, "holds 100 bytes")) << message;
  testing::write_text(path, "");
  EXPECT_TRUE(contains(error_of([&] { TokenShard shard(path); }), "holds 0 bytes"));
}

TEST(TokenShard, RejectsUnreadablePaths) {
  fs::path dir = testing::scratch_dir();
  std::string message = error_of([&] { TokenShard shard(dir / "missing.bin"); });
  EXPECT_TRUE(contains(message, "missing.bin': no such file")) << message;
  fs::create_directory(dir / "a_directory.bin");
  message = error_of([&] { TokenShard shard(dir / "a_directory.bin"); });
  EXPECT_TRUE(contains(message, "a_directory.bin' is a directory, not a regular file")) << message;
  fs::create_symlink(dir / "nowhere.bin", dir / "dangling.bin");
  message = error_of([&] { TokenShard shard(dir / "dangling.bin"); });
  EXPECT_TRUE(contains(message, "dangling.bin': no such file")) << message;
}

}  // namespace
}  // namespace tessera
