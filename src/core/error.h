// Error reporting: TS_CHECK(cond, msg...) throws tessera::Error with a message a user can act on.
// The message names the thing that is wrong and the fix; where() keeps the source location for
// debugging. The CLI prints what() as one line and exits non-zero.
#pragma once

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
