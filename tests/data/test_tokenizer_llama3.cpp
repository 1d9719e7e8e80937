// Llama 3 compatibility: a tokenizer.json in the layout of Meta's release (Split regex + ByteLevel,
// ignore_merges, <|begin_of_text|> from TemplateProcessing, 128,000 tokens + 256 special), written
// by llama3_tokenizer_json.js from the vocabulary and merges of the npm package llama3-tokenizer-js,
// must encode exactly as that package's own encoder and as Hugging Face's tokenizers reading the same
// file. Packages are fetched once with npm into <build>/test-cache/npm; without them these tests skip.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <thread>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/tokenizer_references.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // Texts, IdLists, npm_package, run_node, expect_same and the texts of tokenizer_references.h

constexpr int32_t kBeginOfText = 128000, kEndOfTextId = 128001, kEotId = 128009;

// Llama 3's special tokens in and around text, for the random texts.
const Texts kLlamaSpecials = {"<|begin_of_text|>", "<|end_of_text|>",
                              "<|eot_id|>",        "<|start_header_id|>",
                              "<|end_header_id|>", "<|reserved_special_token_17|>",
                              "<|eot_id",          "|>"};

// Everything compared with the references: hand-picked, chat-formatted, random, a fortunes file,
// our own source code.
Texts llama_texts() {
  Texts texts = varied_texts();
  texts.push_back(
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWHAT'S 2+2?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>");
  texts.push_back("x<|end_of_text|>y <|reserved_special_token_247|> <|reserved_special_token_248|>");
  for (const std::string& text : random_texts(300, 21, kLlamaSpecials)) texts.push_back(text);
  texts.push_back(fortune_sample());
  for (const std::string& text : source_samples()) texts.push_back(text);
  return texts;
}

bool is_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();  // throws on invalid UTF-8
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

class Llama3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    package_ = npm_package("llama3-tokenizer-js@1.2.0", "llama3-tokenizer-js",
                           "package/package.json package/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs", why_);
    if (package_.empty()) return;
    json_ = package_ / "tokenizer.json";
    if (!write_once_with_node(json_, "llama3_tokenizer_json.js", package_, {}, why_)) {
      package_.clear();
      return;
    }
    tokenizer_ = Tokenizer::load(json_);
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }

  void SetUp() override {
    if (package_.empty()) GTEST_SKIP() << why_;
    dir_ = scratch_dir();
  }

  const Tokenizer& llama3() const { return *tokenizer_; }

  IdLists encode_all(const Texts& texts, bool with_special_tokens) const {
    IdLists ids;
    for (const std::string& text : texts)
      ids.push_back(with_special_tokens ? llama3().encode_with_special_tokens(text) : llama3().encode(text));
    return ids;
  }

  static inline fs::path package_, json_;
  static inline std::string why_;
  static inline std::optional<Tokenizer> tokenizer_;
  fs::path dir_;
};

TEST_F(Llama3Test, KnownIds) {
  EXPECT_EQ(llama3().vocab_size(), 128256);
  EXPECT_EQ(llama3().merges().size(), 280147u);
  EXPECT_EQ(llama3().special_tokens().size(), 256u);
  EXPECT_TRUE(llama3().rules().ignore_merges);
  EXPECT_EQ(llama3().rules().pretokenizer.pattern(), kCl100kPattern);
  EXPECT_EQ(llama3().bos_token(), std::optional<int32_t>(kBeginOfText));
  EXPECT_EQ(llama3().eot_token(), kEndOfTextId);
  EXPECT_EQ(llama3().encode("Hello world!"), (std::vector<int32_t>{9906, 1917, 0}));
  EXPECT_EQ(llama3().encode_with_special_tokens("Hello world!"), (std::vector<int32_t>{kBeginOfText, 9906, 1917, 0}));
  EXPECT_EQ(llama3().encode("<|eot_id|>"), (std::vector<int32_t>{kEotId}));
  EXPECT_EQ(llama3().token_text(kBeginOfText), "<|begin_of_text|>");
  EXPECT_EQ(llama3().token_text(128255), "<|reserved_special_token_247|>");
}

TEST_F(Llama3Test, MatchesLlama3TokenizerJs) {
  Texts texts = llama_texts();
  expect_same(texts, encode_all(texts, false),
              run_node("llama3_tokenizer_json.js", {package_, "--encode"}, texts, dir_), "llama3-tokenizer-js");
}

TEST_F(Llama3Test, MatchesHuggingFaceTokenizers) {
  fs::path hf = hf_tokenizers();
  if (hf.empty()) return;
  Texts texts = llama_texts();
  expect_same(texts, encode_all(texts, true), run_node("hf_tokenizers_encode.js", {hf, json_}, texts, dir_),
              "tokenizers (add_special_tokens)");
  expect_same(texts, encode_all(texts, false), run_node("hf_tokenizers_encode.js", {hf, json_, "--plain"}, texts, dir_),
              "tokenizers (plain)");
}

// Tokens that merging alone never makes from their own bytes, although the pre-tokenizer leaves
// them whole: ignore_merges decides their encoding. Both references must agree with it.
TEST_F(Llama3Test, IgnoreMergesMatchesReferencesOnWholeTokens) {
  std::vector<std::string> tokens;
  for (int32_t id = 0; id < llama3().vocab_size(); ++id) tokens.push_back(llama3().token_text(id));
  EncodingRules rules = llama3().rules();
  rules.ignore_merges = false;
  Tokenizer merging(tokens, llama3().merges(), llama3().special_tokens(), "Llama 3 without ignore_merges", rules);
  Texts texts;
  std::vector<std::string_view> pieces;
  for (int32_t id = 0; id < kBeginOfText; ++id) {
    pieces.clear();
    rules.pretokenizer.split(tokens[size_t(id)], pieces);
    if (pieces.size() != 1 || merging.encode(tokens[size_t(id)]) == std::vector<int32_t>{id}) continue;
    if (is_utf8(tokens[size_t(id)])) texts.push_back(tokens[size_t(id)]);  // JavaScript strings need UTF-8
  }
  ASSERT_GT(texts.size(), 0u) << "no token of Llama 3 needs ignore_merges";
  std::printf("%zu tokens that merging alone does not make\n", texts.size());
  for (const std::string& text : texts) EXPECT_EQ(llama3().encode(text).size(), 1u) << text;
  expect_same(texts, encode_all(texts, false),
              run_node("llama3_tokenizer_json.js", {package_, "--encode"}, texts, dir_), "llama3-tokenizer-js");
  fs::path hf = hf_tokenizers();
  if (hf.empty()) return;
  expect_same(texts, encode_all(texts, false), run_node("hf_tokenizers_encode.js", {hf, json_, "--plain"}, texts, dir_),
              "tokenizers (plain)");
}

// Older tokenizer.json files write each merge as one "left right" string; both forms load alike.
TEST_F(Llama3Test, MergesAsStringsLoadAlike) {
  nlohmann::json doc = nlohmann::json::parse(read_text(json_));
  for (nlohmann::json& merge : doc["model"]["merges"])
    merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  write_text(dir_ / "tokenizer.json", doc.dump());
  Tokenizer strings = Tokenizer::load(dir_ / "tokenizer.json");
  EXPECT_EQ(strings.merges(), llama3().merges());
  for (const std::string& text : varied_texts()) EXPECT_EQ(strings.encode(text), llama3().encode(text)) << text;
}

// save_json keeps the pattern, ignore_merges and <|begin_of_text|>: we and Hugging Face read it back alike.
TEST_F(Llama3Test, SavedJsonLoadsIdentically) {
  llama3().save_json(dir_ / "tokenizer.json");
  Tokenizer reloaded = Tokenizer::load(dir_);
  EXPECT_EQ(reloaded.vocab_size(), llama3().vocab_size());
  EXPECT_EQ(reloaded.merges(), llama3().merges());
  EXPECT_EQ(reloaded.bos_token(), llama3().bos_token());
  EXPECT_TRUE(reloaded.rules().ignore_merges);
  Texts texts = llama_texts();
  for (const std::string& text : texts) EXPECT_EQ(reloaded.encode(text), llama3().encode(text)) << text;
  fs::path hf = hf_tokenizers();
  if (hf.empty()) return;
  expect_same(texts, encode_all(texts, true),
              run_node("hf_tokenizers_encode.js", {hf, dir_ / "tokenizer.json"}, texts, dir_),
              "tokenizers reading our saved tokenizer.json");
}

TEST_F(Llama3Test, RoundTripsRandomUtf8AndBytes) {
  std::mt19937 rng(13);
  for (int i = 0; i < 300; ++i) {
    std::string utf8, bytes;
    for (int n = int(rng() % 60); n > 0; --n) {
      uint32_t c = rng() % 4 == 0 ? rng() % 0x80 : rng() % 0x110000;
      if (c >= 0xD800 && c < 0xE000) c = '?';  // surrogates are not characters
      append_utf8(c, utf8);
      bytes += char(rng());
    }
    EXPECT_EQ(llama3().decode(llama3().encode(utf8)), utf8);
    EXPECT_EQ(llama3().decode(llama3().encode(bytes)), bytes);
  }
  std::string invalid = "ok \xff\xfe caf\xc3 \xe2\x82 \xed\xa0\x80 DON'T\x80";
  EXPECT_EQ(llama3().decode(llama3().encode(invalid)), invalid);
}

// The same vocabulary behind an NFC normalizer (as Qwen2's tokenizer.json has one): Hugging Face's
// tokenizers and we encode alike, on the usual texts and on random runs of letters, combining marks
// (in and out of canonical order), Hangul jamo and compatibility ideographs, which NFC rewrites.
TEST_F(Llama3Test, NfcNormalizerMatchesHuggingFace) {
  nlohmann::json doc = nlohmann::json::parse(read_text(json_));
  doc["normalizer"] = {{"type", "NFC"}};
  write_text(dir_ / "tokenizer.json", doc.dump());
  const Tokenizer nfc_tokenizer = Tokenizer::load(dir_ / "tokenizer.json");
  ASSERT_TRUE(nfc_tokenizer.rules().nfc);
  Texts texts = llama_texts();
  const std::vector<std::pair<uint32_t, uint32_t>> pools = {{'a', 'z'},       {' ', ' '},       {0xC0, 0x17F},
                                                            {0x300, 0x36F},   {0x1100, 0x1112}, {0x1161, 0x1175},
                                                            {0x11A8, 0x11C2}, {0x1E00, 0x1EFF}, {0xF900, 0xFA2D},
                                                            {0x0958, 0x095F}, {0x2126, 0x212B}};
  std::mt19937 rng(29);
  for (int i = 0; i < 300; ++i) {
    std::string text;
    for (int n = 1 + int(rng() % 12); n > 0; --n) {
      const auto [first, last] = pools[rng() % pools.size()];
      append_utf8(first + uint32_t(rng() % (last - first + 1)), text);
    }
    texts.push_back(text);
  }
  IdLists ours;
  for (const std::string& text : texts) ours.push_back(nfc_tokenizer.encode_with_special_tokens(text));
  fs::path hf = hf_tokenizers();
  if (hf.empty()) return;
  expect_same(texts, ours, run_node("hf_tokenizers_encode.js", {hf, dir_ / "tokenizer.json"}, texts, dir_),
              "tokenizers with an NFC normalizer");
}

TEST_F(Llama3Test, EncodesAlikeFromManyThreads) {
  Tokenizer fresh = Tokenizer::load(json_);  // an empty piece cache, filled by the threads at once
  Texts texts = random_texts(200, 5, kLlamaSpecials);
  IdLists expected = encode_all(texts, false);
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

}  // namespace
}  // namespace tessera
