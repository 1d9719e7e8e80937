// A read-only memory mapping of a whole regular file (token shards, safetensors files, checksummed
// checkpoint files). A read through a mapping that the storage cannot serve (an I/O error, a network
// mount gone stale) or that lies past the end of a file that shrank while mapped raises SIGBUS, which
// would end the process with a crash dump; while a FileMapping lives, a SIGBUS inside it ends the
// process with one line naming the file instead, exit 1 (a failure tessera launch restarts).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

namespace tessera {

class RegularFile;

class FileMapping {
 public:
  FileMapping() = default;
  // Maps all of `file` (opened as `what`, e.g. "shard 'data/train_000000.bin'"); throws tessera::Error
  // naming it when the mapping fails. An empty file maps to an empty span.
  FileMapping(const RegularFile& file, std::string_view what);
  ~FileMapping();
  FileMapping(FileMapping&& other) noexcept;
  FileMapping& operator=(FileMapping&& other) noexcept;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  void release();

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  int slot_ = -1;                 // its entry in the table the SIGBUS handler reads, or -1
  std::unique_ptr<char[]> what_;  // the entry's name (a heap buffer: it stays put when this object moves)
};

}  // namespace tessera
