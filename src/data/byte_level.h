// GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable code point, so
// a token's raw bytes can be written in vocabulary files as text with no spaces or control
// characters (space becomes "Ġ", newline "Ċ"). Printable Latin-1 bytes stand for themselves.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// Raw bytes -> UTF-8 text in the byte-level alphabet.
std::string byte_level_encode(std::string_view bytes);

// Byte-level text -> raw bytes; nullopt when the text holds a character outside the alphabet
// (or is not UTF-8).
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace tessera
