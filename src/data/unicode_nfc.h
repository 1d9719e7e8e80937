// Unicode Normalization Form C (canonical decomposition, then canonical composition), as Hugging
// Face tokenizers apply it before encoding when a tokenizer.json names the NFC normalizer (Qwen2's).
// Bytes that are not valid UTF-8 pass through unchanged and block composition across them.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

std::string nfc(std::string_view utf8);

}  // namespace tessera
