// Error reporting: TS_CHECK(cond, msg...) throws tessera::Error with a message a user can act on.
// The message names the thing that is wrong and the fix; where() keeps the source location for
// debugging. The CLI prints what() as one line and exits non-zero.
#pragma once

#include <cerrno>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace tessera {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string where)
      : std::runtime_error(std::move(message)), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// The OS's text for an errno value ("No such file or directory"), as strerror gives it.
inline std::string errno_text(int err) { return std::generic_category().message(err); }

// An error every rank of a run hits alike (a bad flag, layout, config, or a NaN loss): ranks other
// than 0 raise it instead of Error so the user reads the message once, from rank 0; the CLI exits
// non-zero without printing it.
class QuietError : public Error {
 public:
  using Error::Error;
};

// The storage failed under an open, a stat or a read (EIO, ESTALE, a network file system's timeout, no
// descriptors or memory left): not the user's input, and a later try may succeed. A run's start-up
// does not take it for a refused configuration, so `tessera launch` restarts the job.
class StorageError : public Error {
 public:
  using Error::Error;
};

// Whether errno value `err` is such a failure of the storage rather than of the path (ENOENT, EACCES,
// ENOTDIR, ...) or of what it holds.
inline bool is_storage_failure(int err) {
  switch (err) {
    case EIO: case ESTALE: case ETIMEDOUT: case EAGAIN: case EINTR: case ENFILE: case EMFILE: case ENOMEM:
    case ENOLINK: case ECOMM: case EREMOTEIO: case EHOSTDOWN: case EHOSTUNREACH: case ENETDOWN: case ENETUNREACH:
    case ENETRESET: case ECONNRESET: case ECONNABORTED: case ECONNREFUSED:
      return true;
    default:
      return false;
  }
}

namespace detail {
// Throws E (Error or a class derived from it, for callers that catch one kind of failure) built from
// the streamed parts.
template <typename E, typename... Parts>
[[noreturn]] void throw_error_as(const char* file, int line, const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw E(message.str(), std::string(file) + ":" + std::to_string(line));
}
template <typename... Parts>
[[noreturn]] void throw_error(const char* file, int line, const Parts&... parts) {
  throw_error_as<Error>(file, line, parts...);
}
}  // namespace detail

}  // namespace tessera

// Throws tessera::Error built from the streamed parts when cond is false.
#define TS_CHECK(cond, ...)                                                  \
  do {                                                                       \
    if (!(cond)) ::tessera::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// Throws unconditionally.
#define TS_FAIL(...) ::tessera::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__)

// TS_CHECK for a system call that left errno value `err`: throws tessera::StorageError when err is a
// failure of the storage (is_storage_failure), else tessera::Error.
#define TS_CHECK_ERRNO(cond, err, ...)                                                                  \
  do {                                                                                                  \
    if (!(cond)) {                                                                                      \
      if (::tessera::is_storage_failure(err))                                                           \
        ::tessera::detail::throw_error_as<::tessera::StorageError>(__FILE__, __LINE__, __VA_ARGS__);    \
      ::tessera::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__);                                  \
    }                                                                                                   \
  } while (0)
