// GPT-2's pre-tokenisation: text is cut into pieces (contractions, letter runs with an optional
// leading space, digit runs, punctuation runs, whitespace) by one regular expression, and BPE then
// runs inside each piece only. PCRE2 in UTF + UCP mode, JIT-compiled when the platform allows.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

namespace tessera {

class Pretokenizer {
 public:
  Pretokenizer();  // compiles the GPT-2 pattern

  // Appends the pieces of `text` to `pieces`, as views into `text`; together they cover it
  // exactly, in order. Bytes that are not valid UTF-8 match nothing in the pattern: each run of
  // them becomes a piece of its own, so arbitrary bytes still round-trip.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Pattern;
  std::shared_ptr<const Pattern> pattern_;  // immutable once compiled; shared by copies
};

}  // namespace tessera
