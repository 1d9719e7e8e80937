// Whole-file reads with POSIX calls, so a failed read is reported instead of lost in a stream.
#include "data/whole_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.h"

namespace tessera {

std::string read_whole_file(const std::filesystem::path& file, std::string_view what) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK(fd >= 0, "cannot read ", what, " ", file.string(), ": ", errno_text(errno));
  std::string bytes;
  std::string failure;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) failure = errno_text(errno);
    if (n <= 0) break;
    bytes.append(buffer, size_t(n));
  }
  ::close(fd);
  TS_CHECK(failure.empty(), "cannot read ", what, " ", file.string(), ": ", failure);
  return bytes;
}

}  // namespace tessera
