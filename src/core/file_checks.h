// Checks on paths a user gives. A file that must be a regular file (a data shard, a tokenizer, a
// config, a checkpoint file): a directory, FIFO, device or socket is refused by kind before anything
// is read, and a FIFO never blocks the open. A folder to write into: created if missing, refused if
// something else stands there. Every error is one line naming the role, the path and the fix.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace tessera {

// An open read-only descriptor of a regular file and its size; closes on destruction.
class RegularFile {
 public:
  // Opens `path`; `what` names its role in errors ("tokenizer file", "shard"). Refuses a missing
  // path, anything but a regular file, and a file larger than max_bytes.
  RegularFile(const std::filesystem::path& path, std::string_view what, uint64_t max_bytes = UINT64_MAX);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Throws unless `path` names a regular file (following symlinks), with the same wording as
// RegularFile; for files a library opens itself.
void require_regular_file(const std::filesystem::path& path, std::string_view what);

// Creates `folder` and its parents unless it is a directory already; `what` names its role
// ("--out-dir"). Refuses a path where a file stands, or one that cannot be created.
void create_folder(const std::filesystem::path& folder, std::string_view what);

}  // namespace tessera
