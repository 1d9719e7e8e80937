// Atomic writes with POSIX calls, so that a failed write, fsync or rename is reported, not lost in
// a stream. The temporary name is ".<name>.tmp.<pid>.<n>": hidden, and unique among live writers.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <string>

#include "core/error.h"

namespace tessera {
namespace {

std::filesystem::path folder_of(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)) {
  static std::atomic<uint64_t> counter{0};
  // Built with += : GCC 12 warns falsely (-Wrestrict) on "." + std::string.
  std::string name = ".";
  name += path_.filename().string();
  name += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  temp_ = folder_of(path_) / name;
  // O_TRUNC, not O_EXCL: a temporary left by a crashed process whose pid has been reused is
  // overwritten rather than refused; no live writer shares the name.
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TS_CHECK(fd_ >= 0, "cannot write ", path_.string(), ": cannot create ", temp_.string(), " (", errno_text(errno),
           "); check the folder exists and is writable");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t(1) << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;  // write() of 0 bytes: nothing more fits
      const std::optional<uint64_t> free = free_disk_bytes(folder_of(path_));
      TS_FAIL("cannot write ", path_.string(), ": write to ", temp_.string(), " failed after ", written_, " bytes (",
              errno_text(err), free ? "; " + std::to_string(*free) + " bytes free on its file system" : "",
              "); check free disk space");
    }
    p += n;
    written_ += uint64_t(n);
    bytes -= size_t(n);
  }
}

void AtomicFileWriter::commit() {
  TS_CHECK(::fsync(fd_) == 0, "cannot write ", path_.string(), ": fsync failed (", errno_text(errno), ")");
  int fd = fd_;
  fd_ = -1;
  TS_CHECK(::close(fd) == 0, "cannot write ", path_.string(), ": close failed (", errno_text(errno), ")");
  TS_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0, "cannot write ", path_.string(), ": cannot rename ",
           temp_.string(), " into place (", errno_text(errno), ")");
  committed_ = true;
  fsync_directory(folder_of(path_));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  AtomicFileWriter file(path);
  file.write(contents.data(), contents.size());
  file.commit();
}

std::optional<uint64_t> free_disk_bytes(const std::filesystem::path& folder) {
  struct statvfs fs {};
  if (::statvfs(folder.c_str(), &fs) != 0) return std::nullopt;
  return uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
}

void fsync_directory(const std::filesystem::path& folder) {
  int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  int rc = ::fsync(fd);
  int sync_errno = errno;
  ::close(fd);
  TS_CHECK(rc == 0 || sync_errno == EINVAL, "fsync of folder ", folder.string(), " failed (", errno_text(sync_errno),
           ")");
}

}  // namespace tessera
