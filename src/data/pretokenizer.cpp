// Pre-tokenisation through PCRE2. The compiled pattern is read-only and safe to share between
// threads; each split() call brings its own match data.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretokenizer.h"

#include <pcre2.h>

#include "core/error.h"
#include "core/user_text.h"

namespace tessera {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Pretokenizer::Pattern {
  std::string text;
  pcre2_code* code = nullptr;

  Pattern(std::string_view pattern, std::string_view where) : text(pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    TS_CHECK(code != nullptr, where, ": PCRE2 cannot compile the pre-tokenizer regex ", quoted_text(text, 120),
             " at offset ", offset, ": ", pcre2_message(error));
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // when JIT is unavailable the interpreter runs
  }
  ~Pattern() { pcre2_code_free(code); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
};

Pretokenizer::Pretokenizer() : Pretokenizer(kGpt2Pattern, "GPT-2's pattern") {}

Pretokenizer::Pretokenizer(std::string_view pattern, std::string_view where)
    : pattern_(std::make_shared<const Pattern>(pattern, where)) {}

const std::string& Pretokenizer::pattern() const { return pattern_->text; }

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(pattern_->code, nullptr), &pcre2_match_data_free);
  TS_CHECK(match != nullptr, "out of memory creating PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t done = 0;
  while (done < text.size()) {
    // PCRE2_NOTEMPTY: a pattern that can match nothing (a tokenizer.json's own) moves on instead.
    int rc = pcre2_match(pattern_->code, subject, text.size(), done, PCRE2_NOTEMPTY, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      pieces.push_back(text.substr(done));  // invalid UTF-8, or text the pattern does not cover
      return;
    }
    TS_CHECK(rc > 0, "PCRE2 failed while splitting text: ", pcre2_message(rc));
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match.get());
    if (span[0] > done) pieces.push_back(text.substr(done, span[0] - done));  // the stretch between matches
    pieces.push_back(text.substr(span[0], span[1] - span[0]));
    done = span[1];
  }
}

}  // namespace tessera
