// Text of tokens as they stream out, made valid UTF-8: a byte-level BPE token may hold part of a
// character, so bytes wait until their character is complete, and bytes that cannot form one become
// U+FFFD, one per maximal invalid subpart (what Hugging Face's decode with errors="replace" prints).
#pragma once

#include <string>
#include <string_view>

namespace tessera {

class Utf8Stream {
 public:
  // The text that `bytes` complete, after what came before; an unfinished character waits.
  std::string add(std::string_view bytes);
  // The end of the stream: an unfinished character becomes U+FFFD.
  std::string finish();

 private:
  std::string pending_;  // the first bytes of an unfinished character
};

// Whole text made valid UTF-8 the same way (a stream of one piece, finished).
std::string valid_utf8(std::string_view bytes);

}  // namespace tessera
