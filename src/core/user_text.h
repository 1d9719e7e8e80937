// User-supplied text inside error messages: one line, bounded, printable. quoted_text() wraps a value a
// user typed or a file held (a key, a path, a token) in quotes, escaping control characters and
// invalid UTF-8 and cutting it to a few hundred characters; one_line() is the CLI's last net for a
// whole message; number_text() writes a number into one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera {

// 'text' with control bytes and invalid UTF-8 written as \n, \t, \xNN, cut after max_chars bytes
// with "... (N bytes)" appended.
std::string quoted_text(std::string_view text, size_t max_chars = 200);

// A library exception's text without its "[json.exception.type_error.302] " tag, escaped and cut, to
// follow our own words about where the error is.
std::string library_detail(std::string_view what);

// A number as messages show it: six significant digits, no trailing zeros (3e-05, 500000, 0.1; nan,
// inf, -inf).
std::string number_text(double value);

// The message itself escaped the same way (no quotes), cut after max_chars bytes.
std::string one_line(std::string_view message, size_t max_chars = 2000);

}  // namespace tessera
