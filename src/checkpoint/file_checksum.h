// Checksums of checkpoint files: CRC-32 (zlib's, the checksum of gzip and zip, so `python3 -c
// "import zlib; ..."` can check one) of the whole file, read in pieces, and its size. A checkpoint
// records both for each of its files and load compares them before any tensor is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tessera {

struct FileDigest {
  uint64_t bytes = 0;
  std::string crc32;  // 8 lowercase hex digits
};

// `what` names the file's role in errors; the file must be a regular file.
FileDigest file_digest(const std::filesystem::path& file, std::string_view what);

}  // namespace tessera
