// One line of a JSON lines file parsed as an object, with errors that say what is wrong with it:
// bytes that are not UTF-8 (by offset), a syntax error (by byte), a value that is no object. A lone
// UTF-16 surrogate escape, which Python's json.loads accepts and UTF-8 cannot hold, reads as U+FFFD.
#include "data/json_line.h"

#include <cstdint>

#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"

namespace tessera {
namespace {

// The offset of the first byte of `text` that does not begin a well-formed UTF-8 character (no
// overlong forms, surrogates or code points past U+10FFFF; as Python names it), or npos.
size_t invalid_utf8_at(std::string_view text) {
  const auto byte = [&](size_t i) { return i < text.size() ? uint8_t(text[i]) : uint8_t(0); };
  for (size_t i = 0; i < text.size();) {
    const uint8_t b = byte(i);
    if (b < 0x80) {
      ++i;
      continue;
    }
    // The length and the allowed range of the second byte (the rest are 0x80..0xBF), by the first.
    size_t length = 0;
    uint8_t low = 0x80, high = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) length = 2;
    else if (b >= 0xE0 && b <= 0xEF) length = 3, low = b == 0xE0 ? 0xA0 : 0x80, high = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) length = 4, low = b == 0xF0 ? 0x90 : 0x80, high = b == 0xF4 ? 0x8F : 0xBF;
    if (length == 0 || byte(i + 1) < low || byte(i + 1) > high) return i;
    for (size_t k = 2; k < length; ++k)
      if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return i;
    i += length;
  }
  return std::string_view::npos;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of a "\uXXXX" escape at `at`, or -1.
int escaped_unit(std::string_view line, size_t at) {
  if (at + 6 > line.size() || line[at] != '\\' || line[at + 1] != 'u') return -1;
  int unit = 0;
  for (size_t k = at + 2; k < at + 6; ++k) {
    const int digit = hex_digit(line[k]);
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

// `line` with every lone UTF-16 surrogate escape inside a string (a high one without the low one
// after it, or a low one alone) written as \ufffd: Python's json.loads accepts such lines, nlohmann
// refuses them, and UTF-8 text cannot hold a lone surrogate, so it becomes the replacement character.
// Unchanged when it has none.
std::string with_lone_surrogates_replaced(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  for (size_t i = 0; i < line.size();) {
    const char c = line[i];
    if (c == '"') in_string = !in_string;
    if (!in_string || c != '\\') {
      out += c;
      ++i;
      continue;
    }
    const int unit = escaped_unit(line, i);
    const bool high = unit >= 0xD800 && unit <= 0xDBFF, low = unit >= 0xDC00 && unit <= 0xDFFF;
    const int next = high ? escaped_unit(line, i + 6) : -1;
    const size_t length = unit < 0 ? 2 : high && next >= 0xDC00 && next <= 0xDFFF ? 12 : 6;
    if ((high && length == 6) || low) out += "\\ufffd";
    else out.append(line.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace

std::string json_line_place(const std::filesystem::path& file, int64_t line_number) {
  return "JSON lines file " + quoted_text(file.string()) + " line " + std::to_string(line_number);
}

nlohmann::json parse_json_line(const std::string& line, const std::filesystem::path& file, int64_t line_number) {
  const auto where = [&] { return json_line_place(file, line_number); };
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    const size_t bad = invalid_utf8_at(line);
    TS_CHECK(bad == std::string::npos, where(), ": byte ", bad + 1, " (0x", "0123456789ABCDEF"[uint8_t(line[bad]) >> 4],
             "0123456789ABCDEF"[uint8_t(line[bad]) & 15], ") is not UTF-8; JSON lines are UTF-8 text: re-encode the ",
             "file (e.g. iconv -f latin1 -t utf-8)");
    j = nlohmann::json::parse(with_lone_surrogates_replaced(line), nullptr, /*allow_exceptions=*/false);
  }
  if (j.is_discarded()) {
    std::string why;
    try {
      [[maybe_unused]] const nlohmann::json parsed = nlohmann::json::parse(with_lone_surrogates_replaced(line));
    } catch (const nlohmann::json::exception& e) {
      why = json_error_text(e);
    }
    TS_FAIL(where(), ": not a JSON object (invalid JSON: ", why, "); JSON lines hold one object per line ",
            "(or give --format text)");
  }
  TS_CHECK(j.is_object(), where(), ": not a JSON object; JSON lines hold one object per line (or give --format text)");
  return j;
}

}  // namespace tessera
