// Llama 2 compatibility: a tokenizer.json in the layout of Meta's Llama 2 release (SentencePiece's BPE
// with byte fallback, the spaces made "▁" after a "▁" prepended, a Strip decoder, <s> from
// TemplateProcessing, 32,000 tokens), written by llama2_tokenizer_json.js from the vocabulary and
// merges of the npm package llama-tokenizer-js, must encode exactly as Hugging Face's tokenizers
// reading the same file and as that package's own encoder; so must the same vocabulary in Gemma's
// layout (no space prepended). Packages are fetched once with npm into <build>/test-cache/npm;
// without them these tests skip.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "data/tokenizer_references.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // Texts, IdLists, npm_package, run_node, expect_same and the texts of tokenizer_references.h

constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;

// Llama 2's special tokens, parts of them and SentencePiece's "▁" in and around text, for the random texts.
const Texts kLlama2Specials = {"<s>", "</s>", "<unk>", "<s", "s>", "\u2581", "\u2581\u2581", "<0x41>"};

// Everything compared with the references: hand-picked (specials against text, spaces, "▁", characters
// the vocabulary lacks), random, a fortunes file, our own source code.
Texts llama2_texts() {
  Texts texts = varied_texts();
  texts.insert(texts.end(), {"a<s>b", "<s> x", "x </s>", "<s><s></s><unk>", " <s> ", "a  <s>  b</s>", "<unk>text",
                             "\u2581", "a\u2581b \u2581\u2581c", "\u2581 leading metaspace", "\t\ttabs first",
                             "\nnewline first", " ", "  ", "control\x01 chars\x7f", "<0x41> <0x0A>",
                             "not in the vocabulary: \U0001F999 \U0001D518 \uA66E \u9451 \u9F98 \U00020000"});
  for (const std::string& text : random_texts(300, 23, kLlama2Specials)) texts.push_back(text);
  texts.push_back(fortune_sample());
  for (const std::string& text : source_samples()) texts.push_back(text);
  return texts;
}

// The texts without Llama 2's special tokens (llama-tokenizer-js spells those out), and without "▁"
// as well when `no_metaspace` (decoding gives a space for it).
Texts without_specials(const Texts& texts, bool no_metaspace) {
  Texts kept;
  for (const std::string& text : texts) {
    bool special = contains(text, "<s>") || contains(text, "</s>") || contains(text, "<unk>");
    if (!special && !(no_metaspace && contains(text, "\u2581"))) kept.push_back(text);
  }
  return kept;
}

IdLists encode_all(const Tokenizer& tokenizer, const Texts& texts, bool with_special_tokens) {
  IdLists ids;
  for (const std::string& text : texts)
    ids.push_back(with_special_tokens ? tokenizer.encode_with_special_tokens(text) : tokenizer.encode(text));
  return ids;
}

class Llama2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    package_ = npm_package("llama-tokenizer-js@1.2.2", "llama-tokenizer-js",
                           "package/package.json package/llama-tokenizer.js", why_);
    if (package_.empty()) return;
    json_ = package_ / "tokenizer.json";
    gemma_json_ = package_ / "gemma-form-tokenizer.json";
    const char* script = "llama2_tokenizer_json.js";
    if (!write_once_with_node(json_, script, package_, {}, why_) ||
        !write_once_with_node(gemma_json_, script, package_, {"--gemma-form"}, why_)) {
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

  const Tokenizer& llama2() const { return *tokenizer_; }

  // Both Hugging Face encodings (with <s> and plain) of `json` against ours from `tokenizer`.
  void expect_hf_same(const Tokenizer& tokenizer, const fs::path& json, const Texts& texts, const char* what) const {
    fs::path hf = hf_tokenizers();
    if (hf.empty()) return;
    expect_same(texts, encode_all(tokenizer, texts, true), run_node("hf_tokenizers_encode.js", {hf, json}, texts, dir_),
                (std::string(what) + ", tokenizers (add_special_tokens)").c_str());
    expect_same(texts, encode_all(tokenizer, texts, false),
                run_node("hf_tokenizers_encode.js", {hf, json, "--plain"}, texts, dir_),
                (std::string(what) + ", tokenizers (plain)").c_str());
  }

  static inline fs::path package_, json_, gemma_json_;
  static inline std::string why_;
  static inline std::optional<Tokenizer> tokenizer_;
  fs::path dir_;
};

TEST_F(Llama2Test, KnownIds) {
  EXPECT_EQ(llama2().vocab_size(), 32000);
  EXPECT_EQ(llama2().merges().size(), 61249u);
  EXPECT_EQ(llama2().special_tokens().size(), 3u);
  EXPECT_TRUE(llama2().rules().sentencepiece());
  EXPECT_EQ(llama2().rules().space_prefix, EncodingRules::SpacePrefix::prepend);
  EXPECT_FALSE(llama2().rules().ignore_merges);
  EXPECT_EQ(llama2().bos_token(), std::optional<int32_t>(kBos));
  EXPECT_EQ(llama2().eot_token(), kEos);
  EXPECT_EQ(llama2().encode("Hello world"), (std::vector<int32_t>{15043, 3186}));
  EXPECT_EQ(llama2().encode_with_special_tokens("Hello world"), (std::vector<int32_t>{kBos, 15043, 3186}));
  EXPECT_EQ(llama2().encode_with_special_tokens(""), std::vector<int32_t>{kBos});
  EXPECT_EQ(llama2().encode("a<s>b"), (std::vector<int32_t>{263, kBos, 289}));  // "▁a", <s>, "▁b"
  EXPECT_EQ(llama2().encode("<unk>"), std::vector<int32_t>{kUnk});
  EXPECT_EQ(llama2().encode("\U0001F600"), (std::vector<int32_t>{29871, 243, 162, 155, 131}));  // "▁", its bytes
  EXPECT_EQ(llama2().token_text(kEos), "</s>");
  EXPECT_EQ(llama2().decode(std::vector<int32_t>{15043, 3186}), "Hello world");
}

TEST_F(Llama2Test, MatchesHuggingFaceTokenizers) { expect_hf_same(llama2(), json_, llama2_texts(), "Llama 2"); }

TEST_F(Llama2Test, MatchesLlamaTokenizerJs) {
  Texts texts = without_specials(llama2_texts(), false);
  expect_same(texts, encode_all(llama2(), texts, false),
              run_node("llama2_tokenizer_json.js", {package_, "--encode"}, texts, dir_), "llama-tokenizer-js");
}

// The space the normalizer prepends is gone again after decoding; so are the spaces "▁" stands for.
TEST_F(Llama2Test, RoundTripsTexts) {
  for (const std::string& text : without_specials(llama2_texts(), true))
    EXPECT_EQ(llama2().decode(llama2().encode(text)), text);
  std::mt19937 rng(17);
  for (int i = 0; i < 300; ++i) {
    std::string utf8, bytes;
    for (int n = int(rng() % 60); n > 0; --n) {
      uint32_t c = rng() % 4 == 0 ? rng() % 0x80 : rng() % 0x110000;
      if ((c >= 0xD800 && c < 0xE000) || c == 0x2581) c = '?';  // surrogates are not characters; "▁" decodes as " "
      append_utf8(c, utf8);
      bytes += char(rng());
    }
    EXPECT_EQ(llama2().decode(llama2().encode(utf8)), utf8);
    if (!contains(bytes, "\u2581")) {
      EXPECT_EQ(llama2().decode(llama2().encode(bytes)), bytes);
    }
  }
}

// save_json keeps the byte fallback, the prepended space and <s>: we and Hugging Face read it back alike.
TEST_F(Llama2Test, SavedJsonLoadsIdentically) {
  llama2().save_json(dir_ / "tokenizer.json");
  Tokenizer reloaded = Tokenizer::load(dir_ / "tokenizer.json");
  EXPECT_EQ(reloaded.vocab_size(), llama2().vocab_size());
  EXPECT_EQ(reloaded.merges(), llama2().merges());
  EXPECT_EQ(reloaded.bos_token(), llama2().bos_token());
  EXPECT_EQ(reloaded.rules().space_prefix, EncodingRules::SpacePrefix::prepend);
  Texts texts = llama2_texts();
  for (const std::string& text : texts)
    EXPECT_EQ(reloaded.encode_with_special_tokens(text), llama2().encode_with_special_tokens(text)) << text;
  expect_hf_same(llama2(), dir_ / "tokenizer.json", texts, "our saved Llama 2");
}

// Gemma's layout of the same vocabulary: no space prepended, nothing stripped when decoding, merges as
// [left, right] pairs, a Split on " " that finds no space left after the normalizer. Encoded as
// Hugging Face and llama-tokenizer-js (without its leading space) encode it, before and after save_json.
TEST_F(Llama2Test, GemmaFormMatchesReferences) {
  const Tokenizer gemma = Tokenizer::load(gemma_json_);
  EXPECT_EQ(gemma.merges(), llama2().merges());
  EXPECT_EQ(gemma.rules().space_prefix, EncodingRules::SpacePrefix::none);
  EXPECT_EQ(gemma.bos_token(), std::optional<int32_t>(kBos));
  EXPECT_EQ(gemma.encode("Hello world"), (std::vector<int32_t>{10994, 3186}));
  EXPECT_EQ(gemma.encode("a<s>b"), (std::vector<int32_t>{29874, kBos, 29890}));
  Texts texts = llama2_texts();
  expect_hf_same(gemma, gemma_json_, texts, "Gemma's layout");
  Texts plain = without_specials(texts, false);
  expect_same(plain, encode_all(gemma, plain, false),
              run_node("llama2_tokenizer_json.js", {package_, "--gemma-form", "--encode"}, plain, dir_),
              "llama-tokenizer-js without its leading space");
  for (const std::string& text : without_specials(texts, true)) EXPECT_EQ(gemma.decode(gemma.encode(text)), text);
  gemma.save_json(dir_ / "tokenizer.json");
  Tokenizer reloaded = Tokenizer::load(dir_ / "tokenizer.json");
  EXPECT_EQ(reloaded.rules().space_prefix, EncodingRules::SpacePrefix::none);
  for (const std::string& text : texts)
    EXPECT_EQ(reloaded.encode_with_special_tokens(text), gemma.encode_with_special_tokens(text)) << text;
  expect_hf_same(gemma, dir_ / "tokenizer.json", texts, "our saved Gemma layout");
}

// transformers' non-legacy Llama tokenizers: no normalizer, a Metaspace pre-tokenizer putting the space
// before the input's first text ("first") or every text ("always"), unless it starts with one, each
// space starting a piece or not (split). Encoded as Hugging Face encodes each, before and after save_json.
TEST_F(Llama2Test, MetaspaceFormsMatchHuggingFace) {
  nlohmann::json doc = nlohmann::json::parse(read_text(json_));
  doc["normalizer"] = nullptr;
  const Texts texts = llama2_texts();
  for (const char* scheme : {"first", "always"}) {
    for (bool split : {false, true}) {
      doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme},
                              {"split", split}};
      const fs::path file = dir_ / (std::string(scheme) + (split ? "-split.json" : ".json"));
      write_text(file, doc.dump());
      const Tokenizer metaspace = Tokenizer::load(file);
      const std::string what = std::string("Metaspace ") + scheme + (split ? " split" : "");
      expect_hf_same(metaspace, file, texts, what.c_str());
      metaspace.save_json(dir_ / "saved.json");
      expect_hf_same(Tokenizer::load(dir_ / "saved.json"), dir_ / "saved.json", texts, ("our saved " + what).c_str());
    }
  }
}

// Llama 2 chat's and Mistral-Instruct's conversations, encoded piece by piece as tokenize writes them
// (each piece continuing the one before it, the first after the start token), give the ids Hugging Face's
// tokenizers give the whole rendered text, "<s>" first as the templates write it: with Llama 2's Prepend
// normalizer (Mistral 7B's too) and with the non-legacy Metaspace "first" form, which puts no space after
// a special token. mistral-v3's with [INST] and [/INST] added as special tokens, as v3's tokenizer has them.
TEST_F(Llama2Test, ChatTemplatesEncodeAsTheirRenderedText) {
  const std::vector<std::vector<ChatMessage>> conversations = {
      {{"user", "Hello world"}, {"assistant", "Hi there!"}},
      {{"system", "Be brief.\n"}, {"user", " What is 2+2? "}, {"assistant", "4"}, {"user", "And 3+3?"},
       {"assistant", "  6\n"}},
      {{"user", "x"}, {"assistant", "\u00e9t\u00e9 \U0001F600 code:\n    pass"}}};
  const nlohmann::json prepend = nlohmann::json::parse(read_text(json_));
  nlohmann::json metaspace = prepend;
  metaspace["normalizer"] = nullptr;
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"},
                                {"split", false}};
  const fs::path hf = hf_tokenizers();
  if (hf.empty()) return;
  for (const char* name : {"llama2", "mistral", "mistral-v3"}) {
    Texts rendered;
    std::vector<std::vector<DocumentPiece>> documents;
    for (const auto& conversation : conversations) {
      documents.push_back(ChatTemplate::named(name).render(conversation));
      std::string text = "<s>";
      for (const DocumentPiece& piece : documents.back()) text += piece.text;
      rendered.push_back(text);
    }
    for (nlohmann::json doc : {prepend, metaspace}) {
      const bool v3 = std::string_view(name) == "mistral-v3";
      for (int i = 0; v3 && i < 2; ++i)
        doc["added_tokens"].push_back({{"id", 32000 + i}, {"content", i == 0 ? "[INST]" : "[/INST]"},
                                       {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                       {"normalized", false}, {"special", true}});
      const fs::path json = dir_ / (std::string(name) + (doc["normalizer"].is_null() ? "-metaspace.json" : ".json"));
      write_text(json, doc.dump());
      const Tokenizer tokenizer = Tokenizer::load(json);
      ASSERT_EQ(tokenizer.special_token_id("[INST]").has_value(), v3);
      IdLists ours;
      for (const auto& pieces : documents)
        ours.push_back(encode_document(tokenizer, pieces, TextStart::after_special).tokens);
      expect_same(rendered, ours, run_node("hf_tokenizers_encode.js", {hf, json, "--plain"}, rendered, dir_),
                  ("the " + std::string(name) + " chats, " + json.filename().string()).c_str());
    }
  }
}

}  // namespace
}  // namespace tessera
