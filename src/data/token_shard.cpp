// Token shard I/O: the header is read and checked with pread before the file is mapped, so a bad
// shard throws without leaving a mapping behind; writes go through AtomicFileWriter.
#include "data/token_shard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/file_checks.h"

namespace tessera {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; a big-endian host needs a byte swap in TokenShard");

namespace {

int64_t bytes_per_token(int version) { return version == 1 ? 2 : 4; }

// Writes the tokens as uint16 in bounded chunks, so a large shard needs no full-size copy.
void write_uint16_tokens(AtomicFileWriter& file, std::span<const uint32_t> tokens) {
  constexpr size_t kChunk = size_t(1) << 20;
  std::vector<uint16_t> narrow;
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    size_t end = std::min(tokens.size(), begin + kChunk);
    narrow.assign(tokens.begin() + ptrdiff_t(begin), tokens.begin() + ptrdiff_t(end));
    file.write(narrow.data(), narrow.size() * 2);
  }
}

}  // namespace

std::array<int32_t, kTokenShardHeaderInts> read_shard_header(const RegularFile& file, std::string_view what,
                                                             std::string_view fix) {
  const int64_t file_bytes = int64_t(file.size());
  TS_CHECK(file_bytes >= kTokenShardHeaderBytes, what, ": the file holds ", file_bytes, " bytes, less than the ",
           kTokenShardHeaderBytes, "-byte header; ", fix);
  std::array<int32_t, kTokenShardHeaderInts> header{};
  const ssize_t got = ::pread(file.fd(), header.data(), size_t(kTokenShardHeaderBytes), 0);
  TS_CHECK_ERRNO(got == kTokenShardHeaderBytes, got < 0 ? errno : 0, what, ": cannot read the header (",
                 got < 0 ? errno_text(errno) : "short read", ")");
  return header;
}

TokenShard::TokenShard(const std::filesystem::path& path) : path_(path) {
  const std::string name = path.string();
  RegularFile file(path, "shard");
  const int64_t file_bytes = int64_t(file.size());
  const std::array<int32_t, kTokenShardHeaderInts> header =
      read_shard_header(file, "shard " + name, "it is not a token shard or was truncated");
  TS_CHECK(header[0] == kTokenShardMagic, "shard ", name, ": bad magic number ", header[0], " (expected ",
           kTokenShardMagic, "); it is not an llm.c token shard");
  TS_CHECK(header[1] == 1 || header[1] == 2, "shard ", name, ": unsupported version ", header[1],
           " (expected 1 for uint16 tokens or 2 for uint32 tokens)");
  TS_CHECK(header[2] >= 0, "shard ", name, ": the header says a negative token count (", header[2],
           "); the file is corrupt, re-create it");
  // Exactly the header's count, as llm.c's loader checks: a file with more tokens than its header says
  // is as suspect as a truncated one (a shard overwritten in place, or two files run together).
  const int64_t width = bytes_per_token(header[1]);
  const int64_t payload = file_bytes - kTokenShardHeaderBytes;
  const int64_t held = payload / width;
  TS_CHECK(held >= header[2], "shard ", name, ": header says ", header[2], " tokens but the file holds only ", held,
           "; the file is truncated, re-create it (tessera tokenize)");
  TS_CHECK(payload == header[2] * width, "shard ", name, ": header says ", header[2], " tokens but the file holds ",
           held, payload % width ? " and a partial one" : "", "; the file is not the shard its header describes, ",
           "re-create it (tessera tokenize)");

  mapping_ = FileMapping(file, "shard " + name);
  tokens_ = reinterpret_cast<const unsigned char*>(mapping_.bytes().data()) + kTokenShardHeaderBytes;
  version_ = header[1];
  num_tokens_ = header[2];
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::move(other.mapping_)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      version_(std::exchange(other.version_, 0)),
      num_tokens_(std::exchange(other.num_tokens_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    path_ = std::move(other.path_);
    mapping_ = std::move(other.mapping_);
    tokens_ = std::exchange(other.tokens_, nullptr);
    version_ = std::exchange(other.version_, 0);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
  }
  return *this;
}

void write_token_shard(const std::filesystem::path& path, std::span<const uint32_t> tokens, int version) {
  const std::string name = path.string();
  TS_CHECK(version == 1 || version == 2, "shard ", name,
           ": version must be 1 (uint16 tokens) or 2 (uint32 tokens), got ", version);
  TS_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()), "shard ", name, ": ", tokens.size(),
           " tokens do not fit the header's int32 count; split them across several shards");
  if (version == 1) {
    for (size_t i = 0; i < tokens.size(); ++i)
      TS_CHECK(tokens[i] <= 0xFFFFu, "shard ", name, ": token ", tokens[i], " at position ", i,
               " does not fit in uint16; write version 2 for vocabularies above 65536 tokens");
  }
  std::array<int32_t, kTokenShardHeaderInts> header{};
  header[0] = kTokenShardMagic;
  header[1] = version;
  header[2] = int32_t(tokens.size());

  AtomicFileWriter file(path);
  file.write(header.data(), size_t(kTokenShardHeaderBytes));
  if (version == 1)
    write_uint16_tokens(file, tokens);
  else
    file.write(tokens.data(), tokens.size_bytes());
  file.commit();
}

}  // namespace tessera
