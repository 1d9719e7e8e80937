// Pre-tokenisation: text is cut into pieces (contractions, letter runs, digit runs, punctuation runs,
// whitespace) by one regular expression, and BPE then runs inside each piece only. The pattern is
// data: GPT-2's by default, cl100k's (= Llama 3's) or o200k's, or whatever a tokenizer.json declares.
// PCRE2 in UTF + UCP mode, JIT-compiled when the platform allows.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// OpenAI's GPT-2 encoder pattern, unchanged.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// tiktoken's cl100k_base pattern; Llama 3's tokenizer.json declares the same one.
inline constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// tiktoken's o200k_base pattern (cased words, contractions attached to the word before them).
inline constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class Pretokenizer {
 public:
  Pretokenizer();  // GPT-2's pattern
  // Compiles `pattern` (PCRE2 syntax, which reads the Oniguruma, Rust and Python patterns of
  // tokenizer files alike); `where` names its origin ("tokenizer.json pre_tokenizer...Regex") in the
  // one-line error raised when PCRE2 cannot compile it.
  Pretokenizer(std::string_view pattern, std::string_view where);

  // Appends the pieces of `text` to `pieces`, as views into `text`; together they cover it
  // exactly, in order. Matches are pieces and so is each stretch between them (Hugging Face's
  // "Isolated" split); empty matches are skipped. Bytes that are not valid UTF-8 match nothing: each
  // run of them becomes a piece of its own, so arbitrary bytes still round-trip.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  const std::string& pattern() const;

 private:
  struct Pattern;
  std::shared_ptr<const Pattern> pattern_;  // immutable once compiled; shared by copies
};

}  // namespace tessera
