// One UTF-8 character read from bytes that may not be UTF-8: what Unicode normalisation and
// SentencePiece's per-character start of BPE both need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera {

struct Utf8Char {
  uint32_t code_point = 0;
  int length = 0;  // bytes; 0 when text[at] does not start valid UTF-8 (overlong, surrogate, truncated)
};

Utf8Char utf8_char_at(std::string_view text, size_t at);

}  // namespace tessera
