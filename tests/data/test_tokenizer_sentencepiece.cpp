// SentencePiece's BPE with byte fallback (Llama 2's and Gemma's tokenizer.json layouts) on a vocabulary
// small enough to work out by hand: spaces as "▁", pieces started from characters, bytes for the
// characters the vocabulary lacks, a space prepended to each text between special tokens (Llama 2's
// Prepend; a Metaspace pre-tokenizer's schemes; none before a text continuing another) and dropped again
// by decode, the text cut at its spaces only where no token spans such a place, saving and loading back,
// and the layouts refused by name. The 32,000-token Llama 2
// vocabulary is checked against Hugging Face's tokenizers in test_tokenizer_llama2.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/choice_examples.h"
#include "data/corpus.h"
#include "data/metaspace.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kSpace(kMetaspace);  // "▁"

// <unk> 0, <s> 1, </s> 2, the byte tokens <0x00>..<0xFF> at 3..258, then `pieces` from 259 on, merged
// by `merges` ("left right", in rank order); Llama 2's normalizer (a "▁" prepended) or Gemma's.
json sentencepiece_json(const std::vector<std::string>& pieces, const std::vector<std::string>& merges,
                        bool prepend) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">"] = 3 + b;
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 259 + i;
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
  json added = json::array();
  for (const char* special : {"<unk>", "<s>", "</s>"})
    added.push_back({{"id", vocab[special]}, {"content", special}, {"special", true}, {"normalized", false}});
  return {{"added_tokens", added},
          {"normalizer", prepend ? json{{"type", "Sequence"},
                                        {"normalizers", {{{"type", "Prepend"}, {"prepend", kSpace}}, replace}}}
                                 : replace},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"model",
           {{"type", "BPE"}, {"byte_fallback", true}, {"fuse_unk", true}, {"unk_token", "<unk>"},
            {"vocab", vocab}, {"merges", merges}}}};
}

Tokenizer load_json(const json& doc) {
  const fs::path file = testing::scratch_dir() / "tokenizer.json";
  testing::write_text(file, doc.dump());
  return Tokenizer::load(file);
}

// ▁ 259, a 260, b 261, é 262, ▁a 263, ▁▁ 264, ab 265, ▁ab 266.
const std::vector<std::string> kPieces = {kSpace, "a", "b", "\xC3\xA9", kSpace + "a", kSpace + kSpace, "ab",
                                          kSpace + "ab"};
const std::vector<std::string> kMerges = {"a b", kSpace + " a", kSpace + " ab", kSpace + " " + kSpace};

TEST(TokenizerSentencePiece, Llama2LayoutEncodesByCharactersWithByteFallback) {
  const Tokenizer tok = load_json(sentencepiece_json(kPieces, kMerges, true));
  using Ids = std::vector<int32_t>;
  EXPECT_EQ(tok.encode("ab a"), (Ids{266, 263}));          // "▁ab▁a": ab merges before ▁a
  EXPECT_EQ(tok.encode("a"), (Ids{263}));                  // one character, with its prepended space
  EXPECT_EQ(tok.encode("  a"), (Ids{264, 263}));           // "▁▁▁a": ▁a (rank 1) before ▁▁ (rank 3)
  EXPECT_EQ(tok.encode("\xC3\xA9"), (Ids{259, 262}));      // é is a token of its own
  EXPECT_EQ(tok.encode("c"), (Ids{259, 3 + 'c'}));         // c is not: its byte token
  EXPECT_EQ(tok.encode("\xE2\x82\xAC"), (Ids{259, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));  // € as three bytes
  EXPECT_EQ(tok.encode(kSpace + "a"), (Ids{259, 263}));    // a "▁" in the text is a space: "▁▁a"
  EXPECT_EQ(tok.encode("a<s>a"), (Ids{263, 1, 263}));      // each text between specials gets its space
  EXPECT_EQ(tok.encode_with_special_tokens("a"), (Ids{1, 263}));
  EXPECT_EQ(tok.bos_token(), 1);
  EXPECT_EQ(tok.eot_token(), 2);  // </s>
  for (const std::string text : {"ab a", "  a", "c\xE2\x82\xAC\xC3\xA9 b", "\xFF\xFE x", ""})
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;  // the prepended space dropped again
  EXPECT_EQ(tok.decode(tok.encode(kSpace + "a")), " a");
  EXPECT_EQ(tok.decode(tok.encode("a<s>a")), "a<s> a");  // only the first is dropped, as transformers' Strip does
}

TEST(TokenizerSentencePiece, GemmaLayoutPrependsNothing) {
  const Tokenizer tok = load_json(sentencepiece_json(kPieces, kMerges, false));
  EXPECT_EQ(tok.encode("ab a"), (std::vector<int32_t>{265, 263}));
  EXPECT_EQ(tok.encode(" a"), (std::vector<int32_t>{263}));
  EXPECT_EQ(tok.decode(tok.encode(" ab a ")), " ab a ");
}

// With a token holding a character then a space ("a▁"), the text cannot be cut before its spaces:
// "a▁" must still form across the place a cut would be.
TEST(TokenizerSentencePiece, ATokenSpanningASpaceKeepsTheTextWhole) {
  std::vector<std::string> pieces = kPieces;
  pieces.push_back("a" + kSpace);  // 267
  std::vector<std::string> merges = {"a " + kSpace};
  const Tokenizer tok = load_json(sentencepiece_json(pieces, merges, false));
  EXPECT_EQ(tok.encode("a a"), (std::vector<int32_t>{267, 260}));
}

TEST(TokenizerSentencePiece, SavesAndLoadsBack) {
  for (bool prepend : {true, false}) {
    const Tokenizer tok = load_json(sentencepiece_json(kPieces, kMerges, prepend));
    const fs::path saved = testing::scratch_dir() / (prepend ? "llama2.json" : "gemma.json");
    tok.save_json(saved);
    const json doc = json::parse(testing::read_text(saved));
    EXPECT_EQ(doc["model"]["byte_fallback"], true);
    EXPECT_EQ(doc["model"]["vocab"]["<0x41>"], 3 + 0x41);
    EXPECT_EQ(doc["model"]["vocab"][kSpace + "ab"], 266);
    EXPECT_EQ(doc["pre_tokenizer"], nullptr);
    EXPECT_EQ(doc["decoder"]["decoders"].size(), prepend ? 4u : 3u);  // Strip after Replace, ByteFallback, Fuse
    const Tokenizer back = Tokenizer::load(saved);
    for (const std::string text : {"ab a", "  a c\xE2\x82\xAC", "a<s>b</s>"})
      EXPECT_EQ(back.encode(text), tok.encode(text)) << text;
    EXPECT_EQ(back.decode(back.encode(" x")), " x");
  }
}

// transformers' non-legacy Llama tokenizers make their spaces with a Metaspace pre-tokenizer instead:
// "first" puts a space before the input's first text only, "always" before every text between special
// tokens, neither before a text that starts with one; split makes each space start a piece.
TEST(TokenizerSentencePiece, MetaspacePreTokenizer) {
  using Ids = std::vector<int32_t>;
  const auto metaspace = [](const char* scheme, bool split) {
    json doc = sentencepiece_json(kPieces, kMerges, true);
    doc["normalizer"] = nullptr;
    doc["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme}, {"split", split}};
    return load_json(doc);
  };
  const Tokenizer first = metaspace("first", false), always = metaspace("always", false);
  EXPECT_EQ(first.encode("a<s>a"), (Ids{263, 1, 260}));
  EXPECT_EQ(always.encode("a<s>a"), (Ids{263, 1, 263}));
  EXPECT_EQ(first.encode(" a"), (Ids{263}));  // it starts with a space: none added
  EXPECT_EQ(always.encode("<s> a"), (Ids{1, 263}));
  EXPECT_EQ(first.encode("   a"), (Ids{264, 263}));  // "▁▁▁a": ▁a, then ▁▁
  EXPECT_EQ(metaspace("first", true).encode("   a"), (Ids{259, 259, 263}));  // "▁", "▁", "▁a" apart
  EXPECT_EQ(metaspace("never", false).encode("a"), (Ids{260}));
  EXPECT_EQ(first.decode(first.encode("ab a")), "ab a");
  for (const char* scheme : {"first", "always"}) {
    const Tokenizer tok = metaspace(scheme, true);
    const fs::path saved = testing::scratch_dir() / (std::string(scheme) + ".json");
    tok.save_json(saved);
    const json doc = json::parse(testing::read_text(saved));
    EXPECT_EQ(doc["pre_tokenizer"]["prepend_scheme"], scheme);
    EXPECT_EQ(doc["pre_tokenizer"]["split"], true);
    const Tokenizer back = Tokenizer::load(saved);
    for (const std::string text : {"a<s>a", "   a b", " ab"}) EXPECT_EQ(back.encode(text), tok.encode(text)) << text;
  }
}

// A text continuing the one before it takes no space (a completion after its prompt, a chat turn's
// content after its header), so a document's pieces encode as their whole text does where a token cannot
// span them; a text right after a special token takes Llama 2's space and Metaspace "always"'s, not
// "first"'s.
TEST(TokenizerSentencePiece, ContinuingTextsTakeNoSpace) {
  using Ids = std::vector<int32_t>;
  const Tokenizer llama2 = load_json(sentencepiece_json(kPieces, kMerges, true));
  EXPECT_EQ(llama2.encode("a", TextStart::continuing), (Ids{260}));
  EXPECT_EQ(llama2.encode("a", TextStart::after_special), (Ids{263}));
  EXPECT_EQ(llama2.encode("a<s>a", TextStart::continuing), (Ids{260, 1, 263}));
  for (const auto& [scheme, after_special] : {std::pair{"first", Ids{260}}, {"always", Ids{263}}}) {
    json doc = sentencepiece_json(kPieces, kMerges, true);
    doc["normalizer"] = nullptr;
    doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme}};
    const Tokenizer metaspace = load_json(doc);
    EXPECT_EQ(metaspace.encode("a", TextStart::after_special), after_special) << scheme;
    EXPECT_EQ(metaspace.encode("a", TextStart::continuing), (Ids{260})) << scheme;
  }
  const EncodedDocument prompted = encode_document(llama2, {{"ab", false}, {" a", true}});
  EXPECT_EQ(prompted.tokens, (Ids{1, 266, 263}));  // <s>, then "ab a" as one text encodes
  EXPECT_EQ(prompted.trained, (std::vector<uint8_t>{0, 0, 1}));
  const EncodedDocument after_end = encode_document(llama2, {{"a</s>", false}, {"a", true}});
  EXPECT_EQ(after_end.tokens, (Ids{1, 263, 2, 263}));  // a new text after </s>: its own space
}

// A multiple-choice example's choices continue its context: " a" is "▁a" alone, no second space prepended.
TEST(TokenizerSentencePiece, ChoicesContinueTheirContext) {
  const Tokenizer llama2 = load_json(sentencepiece_json(kPieces, kMerges, true));
  const fs::path file = testing::scratch_dir() / "choices.jsonl";
  testing::write_text(file, R"({"context": "ab", "choices": ["a", "ab"], "label": 0})" "\n");
  const std::vector<ChoiceExample> examples = read_choice_examples(file, llama2);
  ASSERT_EQ(examples.size(), 1u);
  EXPECT_EQ(examples[0].context, (std::vector<int32_t>{1, 266}));  // <s>, "▁ab"
  EXPECT_EQ(examples[0].choices, (std::vector<std::vector<int32_t>>{{263}, {266}}));
}

TEST(TokenizerSentencePiece, UnsupportedLayoutsAreNamed) {
  json doc = sentencepiece_json(kPieces, kMerges, true);
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "first"}};
  std::string message = testing::error_of([&] { load_json(doc); });
  EXPECT_TRUE(testing::contains(message, "normalizer Sequence before a Metaspace pre-tokenizer is not supported"))
      << message;
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"]["replacement"] = "_";
  message = testing::error_of([&] { load_json(doc); });
  EXPECT_TRUE(testing::contains(message, "pre_tokenizer Metaspace: replacement '\"_\"' is not supported")) << message;
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "sometimes"}};
  message = testing::error_of([&] { load_json(doc); });
  EXPECT_TRUE(testing::contains(message, "prepend_scheme '\"sometimes\"' is not one of")) << message;
  doc = sentencepiece_json(kPieces, kMerges, true);
  doc["pre_tokenizer"] = {{"type", "Whitespace"}};
  message = testing::error_of([&] { load_json(doc); });
  EXPECT_TRUE(testing::contains(message, "pre_tokenizer Whitespace after the normalizer Sequence is not supported"))
      << message;
  doc = sentencepiece_json(kPieces, kMerges, true);
  doc["model"]["vocab"].erase("<0x7F>");
  doc["model"]["vocab"]["x"] = 3 + 0x7F;
  message = testing::error_of([&] { load_json(doc); });
  EXPECT_TRUE(testing::contains(message, "<0x7F> is missing")) << message;
  doc = sentencepiece_json(kPieces, kMerges, true);
  doc["model"]["vocab"]["a b"] = 267;
  message = testing::error_of([&] { load_json(doc); });
  EXPECT_TRUE(testing::contains(message, "'a b' (id 267) holds a plain space")) << message;
  doc = sentencepiece_json(kPieces, kMerges, true);
  doc["normalizer"]["normalizers"][0]["prepend"] = "_";
  message = testing::error_of([&] { load_json(doc); });
  EXPECT_TRUE(testing::contains(message, "is not supported with byte fallback; Tessera reads SentencePiece's Replace"))
      << message;
}

}  // namespace
}  // namespace tessera
