// Checksums of checkpoint files: CRC-32 (zlib's, the checksum of gzip and zip, so `python3 -c
// "import zlib; ..."` can check one) of whole files and of 4 MiB blocks of a tensor's bytes. A
// checkpoint records each file's size and CRC-32, and each stored slice's block CRCs, so a rank that
// reads a few byte ranges verifies just those blocks; a file's CRC joins its pieces' CRCs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct FileDigest {
  uint64_t bytes = 0;
  std::string crc32;  // 8 lowercase hex digits
};

// Slices' bytes are checked in blocks of this size (the last block of a slice may be shorter).
inline constexpr uint64_t kCrcBlockBytes = uint64_t(4) << 20;

// `what` names the file's role in errors; the file must be a regular file.
FileDigest file_digest(const std::filesystem::path& file, std::string_view what);

// CRC-32 of `bytes` bytes, summed in pieces on all OpenMP threads.
uint32_t crc32_of(const void* data, size_t bytes);
// The CRC of kCrcBlockBytes blocks of `data`, in order.
std::vector<uint32_t> block_crcs(const void* data, size_t bytes);
// The CRC-32 of A then B from crc(A), crc(B) and B's length.
uint32_t crc32_join(uint32_t first, uint32_t second, uint64_t second_bytes);

// "0badf00d"; parse_crc32_hex accepts exactly 8 lowercase hex digits.
std::string crc32_hex(uint32_t crc);
bool parse_crc32_hex(std::string_view text, uint32_t& crc);

}  // namespace tessera
