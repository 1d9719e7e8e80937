// Whole-file I/O with POSIX calls, so a failed write or sync is reported instead of lost in a stream.
#include "data/whole_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "core/error.h"

namespace tessera {
namespace {

std::string errno_text() { return std::generic_category().message(errno); }

}  // namespace

std::string read_whole_file(const std::filesystem::path& file, std::string_view what) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK(fd >= 0, "cannot read ", what, " ", file.string(), ": ", errno_text());
  std::string bytes;
  std::string failure;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) failure = errno_text();
    if (n <= 0) break;
    bytes.append(buffer, size_t(n));
  }
  ::close(fd);
  TS_CHECK(failure.empty(), "cannot read ", what, " ", file.string(), ": ", failure);
  return bytes;
}

void write_whole_file_atomically(const std::filesystem::path& file, std::string_view bytes) {
  std::filesystem::path temp = file;
  temp += ".tmp." + std::to_string(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TS_CHECK(fd >= 0, "cannot write ", file.string(), ": cannot create ", temp.string(), " (", errno_text(),
           "); check the folder exists and is writable");
  std::string failure;
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failure = "write: " + errno_text();
      break;
    }
    done += size_t(n);
  }
  if (failure.empty() && ::fsync(fd) != 0) failure = "fsync: " + errno_text();
  if (::close(fd) != 0 && failure.empty()) failure = "close: " + errno_text();
  if (failure.empty() && ::rename(temp.c_str(), file.c_str()) != 0) failure = "rename: " + errno_text();
  if (failure.empty()) return;
  ::unlink(temp.c_str());
  TS_FAIL("cannot write ", file.string(), " (", failure, "); check free disk space and permissions");
}

}  // namespace tessera
