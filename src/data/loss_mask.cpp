// Loss mask files: the header checked against the file's size before the bits are read, writes
// through AtomicFileWriter.
#include "data/loss_mask.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <limits>
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "data/token_shard.h"

namespace tessera {

std::filesystem::path loss_mask_path(const std::filesystem::path& shard) {
  std::filesystem::path path = shard;
  return path.replace_extension(".mask");
}

LossMask::LossMask(const std::filesystem::path& path) : path_(path) {
  const std::string name = path.string();
  RegularFile file(path, "loss mask");
  const int64_t file_bytes = int64_t(file.size());
  const std::array<int32_t, kTokenShardHeaderInts> header =
      read_shard_header(file, "loss mask " + name, "re-create it with tessera tokenize");
  TS_CHECK(header[0] == kLossMaskMagic, "loss mask ", name, ": bad magic number ", header[0], " (expected ",
           kLossMaskMagic, "); a .mask file beside a shard must be its loss mask");
  TS_CHECK(header[1] == 1, "loss mask ", name, ": unsupported version ", header[1], " (expected 1)");
  TS_CHECK(header[2] >= 0, "loss mask ", name, ": the header says a negative token count (", header[2],
           "); re-create it with tessera tokenize");
  TS_CHECK(header[3] >= 0, "loss mask ", name, ": the header says a negative packed sequence length (", header[3],
           "); re-create it with tessera tokenize");
  num_tokens_ = header[2];
  packed_seq_len_ = header[3];
  const int64_t bytes = (num_tokens_ + 7) / 8;
  TS_CHECK(file_bytes - kTokenShardHeaderBytes == bytes, "loss mask ", name, ": the header says ", num_tokens_,
           " tokens (", bytes, " bytes of bits) but the file holds ", file_bytes - kTokenShardHeaderBytes,
           "; re-create it with tessera tokenize");
  bits_.resize(size_t(bytes));
  const ssize_t read = ::pread(file.fd(), bits_.data(), bits_.size(), kTokenShardHeaderBytes);
  TS_CHECK(read == ssize_t(bytes), "loss mask ", name, ": cannot read its ", bytes, " bytes (",
           read < 0 ? errno_text(errno) : "short read", ")");
  TS_CHECK(num_tokens_ % 8 == 0 || bits_.back() >> (num_tokens_ % 8) == 0, "loss mask ", name,
           ": bits are set past its ", num_tokens_, " tokens; re-create it with tessera tokenize");
  for (uint8_t byte : bits_) num_trained_ += std::popcount(byte);
}

void write_loss_mask(const std::filesystem::path& path, std::span<const uint8_t> trained, int64_t packed_seq_len) {
  TS_CHECK(trained.size() <= size_t(std::numeric_limits<int32_t>::max()), "loss mask ", path.string(), ": ",
           trained.size(), " tokens do not fit the header's int32 count; split them across several shards");
  std::array<int32_t, kTokenShardHeaderInts> header{};
  header[0] = kLossMaskMagic;
  header[1] = 1;
  header[2] = int32_t(trained.size());
  header[3] = int32_t(packed_seq_len);
  std::vector<uint8_t> bits((trained.size() + 7) / 8, 0);
  for (size_t i = 0; i < trained.size(); ++i)
    if (trained[i]) bits[i >> 3] |= uint8_t(1u << (i & 7));
  AtomicFileWriter file(path);
  file.write(header.data(), size_t(kTokenShardHeaderBytes));
  file.write(bits.data(), bits.size());
  file.commit();
}

}  // namespace tessera
