// pread of index slices, block CRC checks, and the finiteness check of what was read.
#include "checkpoint/checkpoint_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/user_text.h"

namespace tessera {
namespace fs = std::filesystem;

void verify_checkpoint_file(const fs::path& checkpoint, const std::string& name, const FileDigest& recorded,
                            bool checksum) {
  const fs::path file = checkpoint / name;
  std::error_code ec;
  const uint64_t bytes = fs::file_size(file, ec);
  TS_CHECK(!ec, "checkpoint file ", quoted_text(file.string()), " is missing (", ec.message(),
           "); the checkpoint is incomplete");
  TS_CHECK(bytes == recorded.bytes, "checkpoint file ", quoted_text(file.string()), " holds ", bytes,
           " bytes, state.json records ", recorded.bytes, "; the file is truncated or replaced");
  if (!checksum) return;
  const FileDigest digest = file_digest(file, "checkpoint file");
  TS_CHECK(digest.crc32 == recorded.crc32, "checkpoint file ", quoted_text(file.string()), " is corrupt: its CRC-32 ",
           digest.crc32, " differs from the ", recorded.crc32,
           " recorded in state.json; restore it, or delete this checkpoint to resume from an older one");
}

CheckpointReader::CheckpointReader(fs::path checkpoint, const CheckpointIndex& index,
                                   const std::map<std::string, FileDigest>& files)
    : checkpoint_(std::move(checkpoint)), index_(index), files_(files) {}

CheckpointReader::~CheckpointReader() = default;

const RegularFile& CheckpointReader::open(const std::string& file) {
  std::unique_ptr<RegularFile>& slot = open_[file];
  if (slot) return *slot;
  auto recorded = files_.find(file);
  if (recorded != files_.end()) verify_checkpoint_file(checkpoint_, file, recorded->second, /*checksum=*/false);
  slot = std::make_unique<RegularFile>(checkpoint_ / file, "checkpoint file");
  return *slot;
}

void CheckpointReader::read_slice(const std::string& tensor, const TensorSlice& slice, int64_t begin, int64_t end,
                                  float* out, bool non_negative) {
  const fs::path path = checkpoint_ / slice.file;
  const int fd = open(slice.file).fd();
  // The bytes wanted, within the slice, rounded out to whole CRC blocks when the slice has them.
  const uint64_t want_lo = uint64_t(begin - slice.begin) * sizeof(float), want_hi = uint64_t(end - slice.begin) * sizeof(float);
  const bool blocks = !slice.crcs.empty();
  const uint64_t lo = blocks ? want_lo / kCrcBlockBytes * kCrcBlockBytes : want_lo;
  const uint64_t hi = blocks ? std::min(slice.bytes(), (want_hi + kCrcBlockBytes - 1) / kCrcBlockBytes * kCrcBlockBytes) : want_hi;
  buffer_.resize(size_t(hi - lo));
  for (uint64_t done = 0; done < hi - lo;) {
    const ssize_t n = ::pread(fd, buffer_.data() + done, size_t(hi - lo - done), off_t(slice.offset + lo + done));
    if (n < 0 && errno == EINTR) continue;
    TS_CHECK_ERRNO(n >= 0, errno, "checkpoint file ", quoted_text(path.string()), ": cannot read bytes [",
                   slice.offset + lo + done, ", ", slice.offset + hi, ") of tensor '", tensor, "' (", errno_text(errno),
                   ")");
    TS_CHECK(n > 0, "checkpoint file ", quoted_text(path.string()), ": cannot read bytes [", slice.offset + lo + done,
             ", ", slice.offset + hi, ") of tensor '", tensor, "' (end of file); the file is truncated, restore it or ",
             "resume from an older checkpoint");
    done += uint64_t(n);
  }
  for (uint64_t at = lo; blocks && at < hi; at += kCrcBlockBytes) {
    const uint64_t length = std::min(kCrcBlockBytes, hi - at);
    const uint32_t expected = slice.crcs[size_t(at / kCrcBlockBytes)];
    const uint32_t got = crc32_of(buffer_.data() + (at - lo), size_t(length));
    TS_CHECK(got == expected, "checkpoint file ", quoted_text(path.string()), " is corrupt: bytes [", slice.offset + at,
             ", ", slice.offset + at + length, ") of tensor '", tensor, "' have CRC-32 ", crc32_hex(got),
             ", state.json records ", crc32_hex(expected),
             "; restore it, or delete this checkpoint to resume from an older one");
  }
  std::memcpy(out, buffer_.data() + (want_lo - lo), size_t(want_hi - want_lo));
  for (int64_t i = 0; i < end - begin; ++i)
    TS_CHECK(std::isfinite(out[i]) && !(non_negative && out[i] < 0), "checkpoint file ", quoted_text(path.string()),
             ": tensor '", tensor, "' holds ", out[i], " at element ", begin + i,
             "; the file is corrupt, restore it or resume from an older checkpoint");
}

void CheckpointReader::read(const std::string& tensor, int64_t begin, int64_t end, float* out, bool non_negative) {
  auto it = index_.find(tensor);
  TS_CHECK(it != index_.end(), "checkpoint ", quoted_text(checkpoint_.string()), " holds no tensor '", tensor,
           "'; the files do not belong together");
  TS_CHECK(0 <= begin && begin <= end && end <= shape_numel(it->second.shape), "checkpoint ",
           quoted_text(checkpoint_.string()), ": elements [", begin, ", ", end, ") lie outside tensor '", tensor, "'");
  for (const TensorSlice& s : it->second.slices) {
    const int64_t lo = std::max(begin, s.begin), hi = std::min(end, s.end);
    if (lo < hi) read_slice(tensor, s, lo, hi, out + (lo - begin), non_negative);
  }
}

}  // namespace tessera
