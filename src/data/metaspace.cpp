// Spaces to "▁" and back (metaspace.h).
#include "data/metaspace.h"

namespace tessera {

void append_with_spaces(std::string& out, std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    const size_t metaspace = text.find(kMetaspace, at);
    out.append(text.substr(at, metaspace - at));
    if (metaspace == std::string_view::npos) return;
    out.push_back(' ');
    at = metaspace + kMetaspace.size();
  }
}

std::string with_metaspaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == ' ') {
      out.append(kMetaspace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace tessera
