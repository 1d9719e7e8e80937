// File and block CRC-32 through zlib: 64 MiB pieces (or 4 MiB blocks) are summed on all OpenMP
// threads and joined in order with crc32_combine (zlib's crc32 alone runs at about 0.4 GB/s, too
// slow for a checkpoint of several GB). Files are read through a read-only mapping (core/file_mapping.h).
#include "checkpoint/file_checksum.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/file_mapping.h"
#include "core/user_text.h"

namespace tessera {
namespace {

// The CRC of each `piece`-byte piece of data, computed in parallel.
std::vector<uint32_t> piece_crcs(const void* data, size_t bytes, size_t piece) {
  const auto* base = static_cast<const Bytef*>(data);
  const int64_t pieces = int64_t((bytes + piece - 1) / piece);
  std::vector<uint32_t> crcs(static_cast<size_t>(pieces));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < pieces; ++i) {
    const size_t begin = size_t(i) * piece, length = std::min(piece, bytes - begin);
    crcs[size_t(i)] = uint32_t(crc32(crc32(0L, Z_NULL, 0), base + begin, uInt(length)));
  }
  return crcs;
}

}  // namespace

uint32_t crc32_join(uint32_t first, uint32_t second, uint64_t second_bytes) {
  return uint32_t(crc32_combine(first, second, z_off_t(second_bytes)));
}

uint32_t crc32_of(const void* data, size_t bytes) {
  constexpr size_t kPiece = size_t(64) << 20;
  uint32_t crc = uint32_t(crc32(0L, Z_NULL, 0));
  const std::vector<uint32_t> pieces = piece_crcs(data, bytes, kPiece);
  for (size_t i = 0; i < pieces.size(); ++i) crc = crc32_join(crc, pieces[i], std::min(kPiece, bytes - i * kPiece));
  return crc;
}

std::vector<uint32_t> block_crcs(const void* data, size_t bytes) { return piece_crcs(data, bytes, kCrcBlockBytes); }

std::string crc32_hex(uint32_t crc) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

bool parse_crc32_hex(std::string_view text, uint32_t& crc) {
  if (text.size() != 8) return false;
  crc = 0;
  for (char c : text) {
    if (c >= '0' && c <= '9') crc = crc * 16 + uint32_t(c - '0');
    else if (c >= 'a' && c <= 'f') crc = crc * 16 + uint32_t(c - 'a' + 10);
    else return false;
  }
  return true;
}

FileDigest file_digest(const std::filesystem::path& file, std::string_view what) {
  RegularFile source(file, what);
  const size_t bytes = size_t(source.size());
  uint32_t crc = crc32_of(nullptr, 0);
  if (bytes > 0) {
    const FileMapping mapping(source, std::string(what) + " " + quoted_text(file.string()));
    crc = crc32_of(mapping.bytes().data(), bytes);
  }
  return {uint64_t(bytes), crc32_hex(crc)};
}

}  // namespace tessera
