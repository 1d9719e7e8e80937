// UTF-8 validation by RFC 3629's table (no overlong forms, surrogates or code points above U+10FFFF).
#include "train/utf8_stream.h"

#include <cstddef>

namespace tessera {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The bytes a character starting with `lead` takes (0: `lead` starts none) and the range its second byte
// must fall in; every later byte is a continuation byte, 0x80-0xBF.
struct Lead {
  int length;
  unsigned char low, high;
};

Lead lead_of(unsigned char lead) {
  if (lead < 0x80) return {1, 0, 0};
  if (lead >= 0xC2 && lead <= 0xDF) return {2, 0x80, 0xBF};
  if (lead == 0xE0) return {3, 0xA0, 0xBF};
  if (lead == 0xED) return {3, 0x80, 0x9F};
  if (lead >= 0xE1 && lead <= 0xEF) return {3, 0x80, 0xBF};
  if (lead == 0xF0) return {4, 0x90, 0xBF};
  if (lead >= 0xF1 && lead <= 0xF3) return {4, 0x80, 0xBF};
  if (lead == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes of `text` from `at` belong to the character starting there: its length when they
// are all valid, else the valid prefix (a maximal invalid subpart, at least 1). `complete` says which.
size_t character_at(std::string_view text, size_t at, bool& complete) {
  const Lead lead = lead_of(static_cast<unsigned char>(text[at]));
  complete = lead.length > 0;
  if (lead.length <= 1) return 1;
  size_t n = 1;
  for (; n < size_t(lead.length) && at + n < text.size(); ++n) {
    const auto byte = static_cast<unsigned char>(text[at + n]);
    const bool valid = n == 1 ? byte >= lead.low && byte <= lead.high : byte >= 0x80 && byte <= 0xBF;
    if (!valid) {
      complete = false;
      return n;
    }
  }
  complete = n == size_t(lead.length);
  return n;
}

}  // namespace

std::string Utf8Stream::add(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t at = 0;
  while (at < pending_.size()) {
    bool complete = false;
    const size_t n = character_at(pending_, at, complete);
    if (!complete && at + n == pending_.size() && lead_of(static_cast<unsigned char>(pending_[at])).length > 0)
      break;  // a valid beginning that later bytes may finish
    if (complete) out.append(pending_, at, n);
    else out.append(kReplacement);
    at += n;
  }
  pending_.erase(0, at);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = pending_.empty() ? "" : std::string(kReplacement);
  pending_.clear();
  return out;
}

std::string valid_utf8(std::string_view bytes) {
  Utf8Stream stream;
  std::string out = stream.add(bytes);
  return out + stream.finish();
}

}  // namespace tessera
