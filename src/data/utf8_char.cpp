// Decoding one UTF-8 character, strictly: overlong forms, surrogates, code points past U+10FFFF and
// truncated sequences are not characters.
#include "data/utf8_char.h"

namespace tessera {

Utf8Char utf8_char_at(std::string_view text, size_t at) {
  const unsigned char b = static_cast<unsigned char>(text[at]);
  const int length = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  uint32_t cp = length == 1 ? b : length == 2 ? b & 0x1F : length == 3 ? b & 0x0F : b & 0x07;
  bool valid = length > 0 && at + size_t(length) <= text.size();
  for (int k = 1; valid && k < length; ++k) {
    const unsigned char c = static_cast<unsigned char>(text[at + size_t(k)]);
    valid = (c & 0xC0) == 0x80;
    cp = (cp << 6) | (c & 0x3F);
  }
  static constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
  valid = valid && cp >= kLeast[length] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
  return valid ? Utf8Char{cp, length} : Utf8Char{};
}

}  // namespace tessera
