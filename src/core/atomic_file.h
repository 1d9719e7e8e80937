// Atomic file replacement: the bytes go to a temporary file in the target's folder, which is
// fsynced, renamed over the target, and the folder fsynced, so readers (and a crash) see the old
// file or the complete new one, never a partial one. Every error throws tessera::Error naming the
// file and the OS error (a failed write also the bytes it had written and the room left on the
// disk); a failed or abandoned write removes its temporary file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace tessera {

// A file written in pieces under a temporary name, put in place by commit(). Destroyed
// uncommitted (a failed write, an exception in the caller), it removes the temporary file and
// leaves the target untouched.
class AtomicFileWriter {
 public:
  // Creates the temporary file beside `path`.
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  // fsync, close, rename over the target, fsync the folder.
  void commit();

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Replaces `path` with `contents` atomically.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

// The bytes an unprivileged writer may still put on `folder`'s file system (statvfs), if it says.
std::optional<uint64_t> free_disk_bytes(const std::filesystem::path& folder);

// Makes the creations and renames inside `folder` durable. Skipped where the folder cannot be
// opened for reading or its file system cannot sync a folder (EINVAL); other failures throw.
void fsync_directory(const std::filesystem::path& folder);

}  // namespace tessera
