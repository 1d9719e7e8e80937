// Path checks with POSIX calls: open with O_NONBLOCK (a FIFO without a writer would block the
// open), then fstat, so the kind that is checked is the kind of the file actually opened.
#include "core/file_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.h"
#include "core/user_text.h"

namespace tessera {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void refuse_kind(const std::filesystem::path& path, std::string_view what, mode_t mode) {
  TS_FAIL(what, " ", quoted_text(path.string()), " is ", kind_of(mode), ", not a regular file; give the path of a file");
}

[[noreturn]] void refuse_open(const std::filesystem::path& path, std::string_view what, int err) {
  if (err == ENOENT) TS_FAIL(what, " ", quoted_text(path.string()), ": no such file; check the path");
  TS_CHECK_ERRNO(false, err, what, " ", quoted_text(path.string()), ": cannot open (", errno_text(err), ")");
  __builtin_unreachable();
}

}  // namespace

RegularFile::RegularFile(const std::filesystem::path& path, std::string_view what, uint64_t max_bytes) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) refuse_open(path, what, errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    TS_CHECK_ERRNO(false, err, what, " ", quoted_text(path.string()), ": cannot stat (", errno_text(err), ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    refuse_kind(path, what, st.st_mode);
  }
  size_ = uint64_t(st.st_size);
  if (size_ > max_bytes) {
    ::close(fd_);
    TS_FAIL(what, " ", quoted_text(path.string()), " holds ", size_, " bytes, more than the ", max_bytes,
            "-byte limit for this kind of file; is it the right file?");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);  // ordinary blocking reads from here on
}

RegularFile::~RegularFile() { ::close(fd_); }

void require_regular_file(const std::filesystem::path& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) refuse_open(path, what, errno);
  if (!S_ISREG(st.st_mode)) refuse_kind(path, what, st.st_mode);
}

void create_folder(const std::filesystem::path& folder, std::string_view what) {
  // Created first and judged after: several ranks may create the same folder at once.
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  struct stat st {};
  if (::stat(folder.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  if (::stat(folder.c_str(), &st) == 0)
    TS_FAIL(what, " ", quoted_text(folder.string()), " is ", S_ISREG(st.st_mode) ? "a file" : kind_of(st.st_mode),
            ", not a folder; choose another path");
  TS_FAIL(what, " ", quoted_text(folder.string()), ": cannot create the folder (", ec.message(), ")");
}

}  // namespace tessera
