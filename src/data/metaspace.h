// SentencePiece's space, "▁" (U+2581): its vocabularies spell a token's spaces so, and its normalizers
// turn a text's spaces into it. Tessera's tokens keep spaces as spaces; these convert between the two.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";

// Appends `text` to `out` with each "▁" a space.
void append_with_spaces(std::string& out, std::string_view text);
// `text` with each space a "▁".
std::string with_metaspaces(std::string_view text);

}  // namespace tessera
