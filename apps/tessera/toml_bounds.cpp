// A single pass over the TOML text that knows only strings, comments and brackets: enough to measure
// nesting depth, dotted-key depth, bare-token length and string length without parsing.
#include "toml_bounds.h"

#include "core/error.h"
#include "core/user_text.h"

namespace tessera::cli {
namespace {

constexpr int kMaxDepth = 16;            // [ and { open at once
constexpr int kMaxDotsPerLine = 64;      // dotted keys a.b.c (and decimal points)
constexpr size_t kMaxToken = 1024;       // a bare key or value
constexpr size_t kMaxString = 1 << 16;   // a quoted key or string value

bool is_delimiter(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '[' || c == ']' || c == '{' || c == '}' ||
         c == '=' || c == ',' || c == '"' || c == '\'' || c == '#';
}

}  // namespace

void check_toml_bounds(std::string_view text, const std::string& path) {
  size_t line = 1;
  int depth = 0, dots = 0;
  auto fail = [&](const std::string& what) {
    TS_FAIL("--config ", quoted_text(path), ": line ", line, ": ", what,
            "; a config holds flat `flag = value` lines");
  };
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n') {
      ++line, dots = 0, ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      // A string: basic ("..." with \ escapes) or literal ('...'), single- or triple-quoted.
      const bool triple = text.substr(i, 3) == std::string(3, c);
      const size_t open = triple ? 3 : 1, start = i + open;
      size_t j = start;
      while (j < text.size() && !(text[j] == c && (!triple || text.substr(j, 3) == std::string(3, c)))) {
        if (text[j] == '\\' && c == '"') ++j;
        if (j < text.size() && text[j] == '\n') {
          if (!triple) break;  // toml++ reports the unterminated string
          ++line;
        }
        ++j;
      }
      if (j - start > kMaxString) fail("a string longer than " + std::to_string(kMaxString) + " bytes");
      i = j + (j < text.size() && text[j] == c ? open : 0);
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) fail("brackets nested deeper than " + std::to_string(kMaxDepth) + " levels");
      ++i;
    } else if (c == ']' || c == '}') {
      depth = depth > 0 ? depth - 1 : 0;
      ++i;
    } else if (is_delimiter(c)) {
      ++i;
    } else {
      const size_t start = i;
      while (i < text.size() && !is_delimiter(text[i])) dots += text[i++] == '.';
      if (i - start > kMaxToken)
        fail("a key or value of " + std::to_string(i - start) + " characters (" +
             quoted_text(text.substr(start, 40)) + "), more than " + std::to_string(kMaxToken));
      if (dots > kMaxDotsPerLine) fail("a key dotted deeper than " + std::to_string(kMaxDotsPerLine) + " levels");
    }
  }
}

}  // namespace tessera::cli
