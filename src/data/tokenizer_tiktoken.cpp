// tiktoken rank files (cl100k_base.tiktoken, o200k_base.tiktoken): one "<base64 token bytes> <rank>"
// line per token, the rank being both the token's id and its merge priority. The file name picks the
// encoding's pattern and special tokens, which the file itself does not hold. tiktoken merges any two
// adjacent parts whose bytes are a token, lowest such rank first, and takes a piece that is a token
// whole; here every split of a token into two tokens becomes a merge ranked by that token, and
// ignore_merges is on. Ids no token uses hold "<|unused_ID|>", which no pattern leaves whole.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "core/user_text.h"
#include "data/tokenizer_files.h"
#include "data/whole_file.h"

namespace tessera::vocab_files {
namespace {

struct TiktokenEncoding {
  std::string_view name;
  std::string_view pattern;
  std::vector<SpecialToken> specials;
};

const std::vector<TiktokenEncoding>& known_encodings() {
  static const std::vector<TiktokenEncoding> encodings = {
      {"cl100k_base",
       kCl100kPattern,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}}},
      {"o200k_base", kO200kPattern, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
  };
  return encodings;
}

// Standard base64 (with '=' padding) -> bytes; nullopt on any other character or a bad length.
std::optional<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  size_t padding = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < text.size() - padding; ++i) {
    int v = value(text[i]);
    if (v < 0) return std::nullopt;
    bits = bits << 6 | uint32_t(v);
    if (++count == 4) {
      out.push_back(char(bits >> 16));
      out.push_back(char(bits >> 8));
      out.push_back(char(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count == 3) {
    out.push_back(char(bits >> 10));
    out.push_back(char(bits >> 2));
  } else if (count == 2) {
    out.push_back(char(bits >> 4));
  }
  return out;
}

// Ranks may leave at most this many ids unused (cl100k leaves one), so a rank file cannot make us
// allocate far more than it holds.
constexpr size_t kMaxUnusedRanks = 1024;

// The tokens of the rank file by rank; ranks no line gives are left empty (`used` false).
std::vector<std::string> read_ranks(const std::filesystem::path& file, std::vector<bool>& used) {
  const std::string name = file.string();
  std::string text = read_whole_file(file, "tokenizer file", kMaxTokenizerFileBytes);
  std::vector<std::pair<int32_t, std::string>> lines;
  int32_t max_rank = -1;
  for_each_line(text, [&](std::string_view line, size_t line_number) {
    if (line.empty()) return;
    std::string where = name + " line " + std::to_string(line_number);
    size_t space = line.find(' ');
    TS_CHECK(space != std::string_view::npos, where, ": expected '<base64 token> <rank>', got ", quoted_text(line, 80));
    std::optional<std::string> bytes = base64_decode(line.substr(0, space));
    TS_CHECK(bytes.has_value() && !bytes->empty(), where, ": ", quoted_text(line.substr(0, space), 80),
             " is not base64 of a token");
    std::string_view digits = line.substr(space + 1);
    bool whole =
        !digits.empty() && digits.size() < 10 && digits.find_first_not_of("0123456789") == std::string_view::npos;
    TS_CHECK(whole, where, ": rank ", quoted_text(digits, 40), " is not a whole number below 10^9");
    auto rank = int32_t(std::stol(std::string(digits)));
    lines.emplace_back(rank, std::move(*bytes));
    max_rank = std::max(max_rank, rank);
  });
  TS_CHECK(!lines.empty(), name, ": no tokens; expected one '<base64 token> <rank>' line per token");
  TS_CHECK(size_t(max_rank) < lines.size() + kMaxUnusedRanks, name, ": rank ", max_rank, " leaves more than ",
           kMaxUnusedRanks, " of the ", max_rank + 1, " ids unused; tiktoken ranks run from 0 with few gaps");
  std::vector<std::string> tokens(size_t(max_rank) + 1);
  used.assign(tokens.size(), false);
  for (auto& [rank, bytes] : lines) {
    TS_CHECK(!used[size_t(rank)], name, ": rank ", rank, " is given to two tokens");
    tokens[size_t(rank)] = std::move(bytes);
    used[size_t(rank)] = true;
  }
  return tokens;
}

// Every split of a token into two tokens, as a merge ranked by the token it makes.
void add_split_merges(const std::vector<std::string>& tokens, const std::vector<bool>& used,
                      std::vector<BpeMerge>& merges, std::vector<int32_t>& ranks) {
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(tokens.size());
  for (size_t r = 0; r < tokens.size(); ++r)
    if (used[r]) ids.emplace(tokens[r], int32_t(r));
  for (size_t r = 0; r < tokens.size(); ++r) {
    std::string_view token = tokens[r];
    for (size_t k = 1; used[r] && k < token.size(); ++k) {
      auto left = ids.find(token.substr(0, k)), right = ids.find(token.substr(k));
      if (left == ids.end() || right == ids.end()) continue;
      merges.push_back({left->second, right->second, int32_t(r)});
      ranks.push_back(int32_t(r));
    }
  }
}

}  // namespace

Tokenizer load_tiktoken(const std::filesystem::path& file) {
  const std::string stem = file.stem().string();
  const TiktokenEncoding* encoding = nullptr;
  for (const TiktokenEncoding& e : known_encodings())
    if (stem == e.name) encoding = &e;
  TS_CHECK(encoding != nullptr, file.string(), ": unknown tiktoken encoding ", quoted_text(stem, 60),
           "; the file name picks its pattern and special tokens: cl100k_base.tiktoken or o200k_base.tiktoken");
  std::vector<bool> used;
  std::vector<std::string> tokens = read_ranks(file, used);
  std::vector<BpeMerge> merges;
  EncodingRules rules;
  rules.pretokenizer = Pretokenizer(encoding->pattern, std::string(encoding->name) + "'s pattern");
  rules.ignore_merges = true;
  add_split_merges(tokens, used, merges, rules.merge_ranks);
  for (const SpecialToken& s : encoding->specials) {
    TS_CHECK(size_t(s.id) >= tokens.size() || !used[size_t(s.id)], file.string(), ": rank ", s.id, " belongs to ",
             s.text, " in ", encoding->name, ", but the file gives it to a token");
    if (size_t(s.id) >= tokens.size()) {
      tokens.resize(size_t(s.id) + 1);
      used.resize(size_t(s.id) + 1, false);
    }
    tokens[size_t(s.id)] = s.text;
    used[size_t(s.id)] = true;
  }
  for (size_t r = 0; r < tokens.size(); ++r)
    if (!used[r]) tokens[r] = "<|unused_" + std::to_string(r) + "|>";
  return Tokenizer(std::move(tokens), std::move(merges), encoding->specials, file.string(), std::move(rules));
}

}  // namespace tessera::vocab_files
