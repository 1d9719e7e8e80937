// The byte <-> code point table of GPT-2's byte-level BPE, and conversions through it.
// Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to themselves; the other 68 bytes map, in
// increasing byte order, to U+0100, U+0101, ... so that every byte has a visible stand-in.
#include "data/byte_level.h"

#include <array>
#include <cstdint>

namespace tessera {
namespace {

constexpr int kFirstShifted = 256;
constexpr int kLastCodePoint = kFirstShifted + 68;  // exclusive

bool stands_for_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct Table {
  std::array<char32_t, 256> code_point{};
  std::array<int16_t, kLastCodePoint> byte{};  // -1: code point outside the alphabet

  Table() {
    byte.fill(-1);
    int shifted = kFirstShifted;
    for (int b = 0; b < 256; ++b) {
      code_point[size_t(b)] = stands_for_itself(b) ? char32_t(b) : char32_t(shifted++);
      byte[code_point[size_t(b)]] = int16_t(b);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

void append_utf8(char32_t c, std::string& out) {  // c < 0x800 here
  if (c < 0x80) {
    out.push_back(char(c));
  } else {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const Table& t = table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(t.code_point[b], out);
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  const Table& t = table();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto lead = static_cast<unsigned char>(text[i]);
    char32_t c;
    if (lead < 0x80) {
      c = lead;
      i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < text.size() && (text[i + 1] & 0xC0) == 0x80) {
      c = char32_t(lead & 0x1F) << 6 | char32_t(text[i + 1] & 0x3F);
      if (c < 0x80) return std::nullopt;  // overlong form
      i += 2;
    } else {
      return std::nullopt;  // longer sequences are all outside the alphabet
    }
    if (c >= char32_t(kLastCodePoint) || t.byte[c] < 0) return std::nullopt;
    out.push_back(char(t.byte[c]));
  }
  return out;
}

}  // namespace tessera
