// File CRC-32 through zlib, 4 MiB at a time.
#include "checkpoint/file_checksum.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"

namespace tessera {

FileDigest file_digest(const std::filesystem::path& file, std::string_view what) {
  RegularFile source(file, what);
  std::vector<unsigned char> buffer(size_t(4) << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t total = 0;
  while (true) {
    ssize_t n = ::read(source.fd(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    TS_CHECK(n >= 0, "cannot read ", what, " ", quoted_text(file.string()), ": ", errno_text(errno));
    if (n == 0) break;
    crc = crc32(crc, buffer.data(), uInt(n));
    total += uint64_t(n);
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return {total, hex};
}

}  // namespace tessera
