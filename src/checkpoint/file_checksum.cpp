// File CRC-32 through zlib over a read-only mapping: 64 MiB pieces are summed on all OpenMP threads
// and joined in order with crc32_combine (zlib's crc32 alone runs at about 0.4 GB/s, too slow for a
// checkpoint of several GB).
#include "checkpoint/file_checksum.h"

#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"

namespace tessera {

FileDigest file_digest(const std::filesystem::path& file, std::string_view what) {
  RegularFile source(file, what);
  const size_t bytes = size_t(source.size());
  uLong crc = crc32(0L, Z_NULL, 0);
  if (bytes > 0) {
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, source.fd(), 0);
    TS_CHECK(map != MAP_FAILED, "cannot read ", what, " ", quoted_text(file.string()), ": ", errno_text(errno));
    const auto* data = static_cast<const Bytef*>(map);
    constexpr size_t kPiece = size_t(64) << 20;
    const int64_t pieces = int64_t((bytes + kPiece - 1) / kPiece);
    std::vector<uLong> piece_crc(static_cast<size_t>(pieces));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < pieces; ++i) {
      const size_t begin = size_t(i) * kPiece, length = std::min(kPiece, bytes - begin);
      piece_crc[size_t(i)] = crc32(crc32(0L, Z_NULL, 0), data + begin, uInt(length));
    }
    ::munmap(map, bytes);
    for (int64_t i = 0; i < pieces; ++i)
      crc = crc32_combine(crc, piece_crc[size_t(i)], z_off_t(std::min(kPiece, bytes - size_t(i) * kPiece)));
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return {uint64_t(bytes), hex};
}

}  // namespace tessera
