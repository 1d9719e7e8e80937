// Whole-file reads with POSIX calls, so a failed read is reported instead of lost in a stream.
#include "data/whole_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"

namespace tessera {

std::string read_whole_file(const std::filesystem::path& file, std::string_view what, uint64_t max_bytes) {
  RegularFile source(file, what, max_bytes);
  std::string bytes;
  bytes.reserve(size_t(source.size()));
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(source.fd(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    TS_CHECK_ERRNO(n >= 0, errno, "cannot read ", what, " ", quoted_text(file.string()), ": ", errno_text(errno));
    if (n == 0) break;
    bytes.append(buffer, size_t(n));
    TS_CHECK(bytes.size() <= max_bytes, what, " ", quoted_text(file.string()), " grew past the ", max_bytes,
             "-byte limit while being read");
  }
  return bytes;
}

void for_each_line(std::string_view text, const std::function<void(std::string_view line, size_t number)>& visit) {
  size_t number = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    visit(line, ++number);
  }
}

}  // namespace tessera
