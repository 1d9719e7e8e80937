// Escaping of user text for one-line messages: printable ASCII and valid UTF-8 sequences pass,
// everything else becomes an escape, so a binary file's bytes never reach the terminal raw.
#include "core/user_text.h"

#include <cmath>
#include <cstdio>

namespace tessera {
namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when it is not one.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 && lead <= 0xDF ? 2 : 0;
  if (length == 0 || i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  return length;
}

std::string escaped(std::string_view text, size_t max_chars) {
  std::string out;
  size_t i = 0;
  for (; i < text.size() && out.size() < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (size_t n = c >= 0x80 ? utf8_sequence_length(text, i) : 0; n > 0) {
      out.append(text.substr(i, n));
      i += n - 1;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  if (i < text.size()) {
    out += "... (";
    out += std::to_string(text.size());
    out += " bytes)";
  }
  return out;
}

}  // namespace

std::string quoted_text(std::string_view text, size_t max_chars) {
  std::string out = "'";  // built with += : GCC 12 warns falsely (-Wrestrict) on "'" + std::string
  out += escaped(text, max_chars);
  out += '\'';
  return out;
}

std::string one_line(std::string_view message, size_t max_chars) { return escaped(message, max_chars); }

std::string library_detail(std::string_view what) {
  if (what.starts_with('[') && what.find("] ") != std::string_view::npos) what.remove_prefix(what.find("] ") + 2);
  return escaped(what, 300);
}

std::string number_text(double value) {
  if (std::isnan(value)) return "nan";  // printf writes the sign bit a NaN happens to carry: "-nan"
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

}  // namespace tessera
