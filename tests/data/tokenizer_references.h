// What the tokenizer tests share for comparing with reference encoders: npm packages fetched once
// into the build tree (<build>/test-cache/npm), our node scripts beside this file, the texts
// encoded (hand-picked, random, a fortunes file, our own source code) and the comparison of the
// ids. Without node, npm or the registry the tests that need them skip.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace tessera::testing {

using Texts = std::vector<std::string>;
using IdLists = std::vector<std::vector<int32_t>>;

inline const std::filesystem::path kTokenizerScripts = std::filesystem::path(TESSERA_SOURCE_DIR) / "tests" / "data";

// Appends a space and `path` as one shell word (our paths hold no single quote).
inline void append_word(std::string& line, const std::filesystem::path& path) {
  line += " '";
  line += path.string();
  line += '\'';
}

// Unpacks the tar members `members` of npm package `spec` into <build>/test-cache/npm/<folder> on
// first use and reuses them later. Returns the package folder, or an empty path and the reason.
inline std::filesystem::path npm_package(const std::string& spec, const std::string& folder, const std::string& members,
                                         std::string& why) {
  namespace fs = std::filesystem;
  fs::path cache = fs::path(TESSERA_BINARY_DIR) / "test-cache" / "npm";
  fs::path target = cache / folder;
  if (run_command("command -v node && command -v npm").exit_code != 0) {
    why = "node and npm are needed to fetch and run the reference " + spec;
    return {};
  }
  if (fs::exists(target / "package.json")) return target;
  fs::path work = cache / (folder + ".fetching." + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  std::string line = "(cd";
  append_word(line, work);
  line += " && npm pack --silent " + spec + " >/dev/null && tar xzf *.tgz --wildcards " + members + ")";
  CommandResult result = run_command(line);
  std::error_code ignored;  // a concurrent test process may have put its copy in place first
  if (result.exit_code == 0) fs::rename(work / "package", target, ignored);
  fs::remove_all(work);
  why = "cannot fetch " + spec + " with npm: " + result.output;
  return fs::exists(target / "package.json") ? target : fs::path();
}

// Runs node on one of our scripts with `args`, then a file of `texts` (JSON) and an output file
// (in `dir`), and returns the id lists the script wrote there. A failure is a test failure.
inline IdLists run_node(const std::string& script, const std::vector<std::string>& args, const Texts& texts,
                        const std::filesystem::path& dir) {
  std::filesystem::path in = dir / "texts.json", out = dir / "ids.json";
  write_text(in, nlohmann::json(texts).dump());
  std::string line = "node";
  append_word(line, kTokenizerScripts / script);
  for (const std::string& a : args) append_word(line, a);
  append_word(line, in);
  append_word(line, out);
  CommandResult result = run_command(line);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  if (result.exit_code != 0) return IdLists(texts.size());
  return nlohmann::json::parse(read_text(out)).get<IdLists>();
}

// Runs `node script package [options] FILE` to write `file` (beside the package: once, through a
// temporary file renamed into place) unless an earlier run did; false, with `why`, when the script fails.
inline bool write_once_with_node(const std::filesystem::path& file, const std::string& script,
                                 const std::filesystem::path& package, const std::vector<std::string>& options,
                                 std::string& why) {
  if (std::filesystem::exists(file)) return true;
  std::filesystem::path partial = file;
  partial += std::string(".").append(std::to_string(::getpid()));  // not "." + ...: GCC 12's -Wrestrict
  std::string line = "node";
  append_word(line, kTokenizerScripts / script);
  append_word(line, package);
  for (const std::string& option : options) append_word(line, option);
  append_word(line, partial);
  CommandResult result = run_command(line);
  if (result.exit_code != 0) {
    why = script + " failed: " + result.output;
    return false;
  }
  std::filesystem::rename(partial, file);
  return true;
}

// Hugging Face's tokenizers (the Rust library inside its npm package), fetched like the other
// reference packages; empty when unavailable, which fails the test: callers ask once another
// package came through, so this one should too.
inline std::filesystem::path hf_tokenizers() {
  std::string why;
  std::filesystem::path hf =
      npm_package("tokenizers@0.23.2", "tokenizers",
                  "package/package.json package/index.js 'package/tokenizers.linux-*.node'", why);
  if (hf.empty()) ADD_FAILURE() << why;
  return hf;
}

// Each text's ids from us and from `reference` are the same; prints how much was compared.
inline void expect_same(const Texts& texts, const IdLists& ours, const IdLists& theirs, const char* reference) {
  ASSERT_EQ(texts.size(), ours.size());
  ASSERT_EQ(texts.size(), theirs.size());
  size_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(ours[i], theirs[i]) << reference << ", text " << i << ": '" << texts[i] << "'";
    tokens += theirs[i].size();
  }
  std::printf("%s: %zu texts, %zu tokens compared\n", reference, texts.size(), tokens);
}

inline void append_utf8(uint32_t c, std::string& out) {
  int tail = c < 0x80 ? 0 : c < 0x800 ? 1 : c < 0x10000 ? 2 : 3;
  static constexpr unsigned char kLead[] = {0x00, 0xC0, 0xE0, 0xF0};
  out.push_back(char(kLead[tail] | (c >> (6 * tail))));
  for (int k = tail - 1; k >= 0; --k) out.push_back(char(0x80 | ((c >> (6 * k)) & 0x3F)));
}

// Random text drawn from pieces that exercise every branch of the pre-tokenisation patterns, and
// `extra` pieces (a vocabulary's special tokens).
inline Texts random_texts(int count, uint32_t seed, const Texts& extra = {"<|endoftext|>"}) {
  // clang-format off
  Texts pool = {"a", "Z", "q", "the", " ", "  ", "\n", "\t", "\r\n", "\r", "'", "'s", "'ll", "'T", "'RE", ",", ".",
                "!?", "-", "$", "0", "7", "42", "1234", "é", "ß", "Ω", "ж", "中", "語", "한", "😀", "🏽", "٣", "½",
                "Ⅻ", "\u00a0", "\u3000", "→", "¿", "<|", "|>", "Ġ", "\u0301", "/", "DON", "Don"};
  // clang-format on
  pool.insert(pool.end(), extra.begin(), extra.end());
  std::mt19937 rng(seed);
  Texts texts;
  for (int i = 0; i < count; ++i) {
    std::string text;
    for (int n = int(rng() % 40); n > 0; --n) text += pool[rng() % pool.size()];
    texts.push_back(text);
  }
  return texts;
}

// Hand-picked text: prose, code, numbers, whitespace runs, line endings, many scripts, emoji,
// contractions in both cases, and <|endoftext|> in and around words.
inline const Texts& varied_texts() {
  static const Texts texts = {"Hello world",
                              "Hello, world! How are you today?",
                              " leading space",
                              "trailing space ",
                              "I'm sure you'll see they've done what we'd said: it's John's, isn't it? I'M SHOUTING'S",
                              "DON'T WON'T CAN'T SHE'LL THEY'RE WE'VE I'D HE'S It'S you'Re",
                              "1234567890 3.14159 -42 1,000,000 2024-01-31 0x1F",
                              "12345678901234567890123 9876543210 007 1e100 ٣٤٥٦ ½",
                              "  multiple   spaces   here  ",
                              "\n\nnew\nlines\n\n\n",
                              "tabs\tand\t\tmore\t",
                              "\r\n windows line endings\r\n",
                              "line one\r\nline two\r\n\r\n  indented\r\n\r\n\r\n",
                              "old mac\rline\r\r",
                              "emoji 😀🎉 👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
                              "中文字符测试，日本語のテキスト、한국어 문장",
                              "café naïve résumé Ångström façade",
                              "Ελληνικά русский العربية עברית हिन्दी ไทย",
                              "punctuation!!! ??? ... --- ((())) [{}] @#$%^&*",
                              "mixed123abc 4x4 h2o C3PO",
                              "<|endoftext|>",
                              "before<|endoftext|>after",
                              "a <|endoftext|> <|endoftext|>b",
                              "<|endoftext",
                              "endoftext|>",
                              " \t\n \u00a0nbsp\u3000ideographic",
                              "   ",
                              "https://example.com/path?q=1&r=2#frag",
                              "def f(x):\n    return x ** 2\n\n\nclass A:\n\tpass\n",
                              "    indented\n        more",
                              "int main() {\n  std::vector<int> v{1, 2, 3};\n  return v[0] != 1;\n}\n",
                              "",
                              "x",
                              "'",
                              "''''",
                              "'s's",
                              "don't'll",
                              "ünïcödé'S",
                              "Ġ Ċ ĉ",
                              "ﬁ ligature ½ ¾ ²³ ①②",
                              "zero\u200bwidth\u200djoiner",
                              "combining e\u0301 a\u0308",
                              "a\u0085b a \u0085 b x\ufeff y a\u180eb a\u2028b\u2029c \u1680x \u205fy a\vb\fc",
                              "it'\u017f IT'\u017f \u212a 'K 12\u0660\u06f1\uff13",
                              "aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                              "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
                              "                                        x"};
  return texts;
}

// A few kilobytes of a fortunes file, cut at a line end; empty when the package is not installed.
inline std::string fortune_sample() {
  std::string text = read_text("/usr/share/games/fortunes/fortunes");
  if (text.size() > 6000) text.resize(text.rfind('\n', 6000) + 1);
  return text;
}

// Our own source files as text: C++ with its comments, and the README's prose and commands.
inline Texts source_samples() {
  Texts texts;
  for (const char* file : {"src/data/tokenizer.cpp", "src/data/pretokenizer.h", "README.md"})
    texts.push_back(read_text(std::filesystem::path(TESSERA_SOURCE_DIR) / file));
  return texts;
}

}  // namespace tessera::testing
