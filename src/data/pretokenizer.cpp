// Pre-tokenisation with GPT-2's pattern through PCRE2. The compiled pattern is read-only and safe
// to share between threads; each split() call brings its own match data.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretokenizer.h"

#include <pcre2.h>

#include <string>

#include "core/error.h"

namespace tessera {
namespace {

// The pattern of OpenAI's GPT-2 encoder, unchanged.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Pretokenizer::Pattern {
  pcre2_code* code = nullptr;

  Pattern() {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern.data()), kGpt2Pattern.size(),
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    TS_CHECK(code != nullptr, "PCRE2 cannot compile the GPT-2 pattern at offset ", offset, ": ", pcre2_message(error),
             " (is libpcre2-8 built with Unicode support?)");
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // when JIT is unavailable the interpreter runs
  }
  ~Pattern() { pcre2_code_free(code); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
};

Pretokenizer::Pretokenizer() : pattern_(std::make_shared<const Pattern>()) {}

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(pattern_->code, nullptr), &pcre2_match_data_free);
  TS_CHECK(match != nullptr, "out of memory creating PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t done = 0;
  while (done < text.size()) {
    int rc = pcre2_match(pattern_->code, subject, text.size(), done, 0, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      pieces.push_back(text.substr(done));  // only invalid UTF-8 is left
      return;
    }
    TS_CHECK(rc > 0, "PCRE2 failed while splitting text: ", pcre2_message(rc));
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match.get());
    if (span[0] > done) pieces.push_back(text.substr(done, span[0] - done));  // invalid UTF-8 run
    TS_CHECK(span[1] > span[0], "PCRE2 returned an empty piece at byte ", span[0]);
    pieces.push_back(text.substr(span[0], span[1] - span[0]));
    done = span[1];
  }
}

}  // namespace tessera
