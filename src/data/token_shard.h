// Token shards in the llm.c format: a header of 256 int32 (magic 20240520, version, token count)
// followed by the tokens, uint16 (version 1) or uint32 (version 2), little-endian. A TokenShard maps
// the file read-only and checks that it holds exactly the header's token count (as llm.c does)
// before any token is read;
// write_token_shard writes a shard atomically (temporary file, fsync, rename).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string_view>

#include "core/error.h"
#include "core/file_mapping.h"

namespace tessera {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int64_t kTokenShardHeaderInts = 256;
inline constexpr int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;

class RegularFile;

// The header of a file laid out as a shard (token shards, loss masks), after checking the file
// holds one; errors start with `what` (e.g. "shard data/train_000000.bin") and a short file's ends
// with `fix`.
std::array<int32_t, kTokenShardHeaderInts> read_shard_header(const RegularFile& file, std::string_view what,
                                                             std::string_view fix);

class TokenShard {
 public:
  // Maps `path`; throws tessera::Error naming the file when it cannot be read or is not a valid shard.
  explicit TokenShard(const std::filesystem::path& path);
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;

  const std::filesystem::path& path() const { return path_; }
  int version() const { return version_; }
  int64_t num_tokens() const { return num_tokens_; }

  // Token i, 0 <= i < num_tokens().
  uint32_t token(int64_t i) const {
    TS_CHECK(i >= 0 && i < num_tokens_, "shard ", path_.string(), ": token ", i, " is out of range [0, ",
             num_tokens_, ")");
    if (version_ == 1) {
      uint16_t t;
      std::memcpy(&t, tokens_ + 2 * i, 2);
      return t;
    }
    uint32_t t;
    std::memcpy(&t, tokens_ + 4 * i, 4);
    return t;
  }

 private:
  std::filesystem::path path_;
  FileMapping mapping_;  // the whole file
  const unsigned char* tokens_ = nullptr;  // first token, just past the header
  int version_ = 0;
  int64_t num_tokens_ = 0;
};

// Writes `tokens` as a shard of the given version (1: uint16, every token < 65536; 2: uint32).
void write_token_shard(const std::filesystem::path& path, std::span<const uint32_t> tokens, int version);

}  // namespace tessera
