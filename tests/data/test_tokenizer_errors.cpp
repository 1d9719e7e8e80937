// Bad tokenizer input: each case throws tessera::Error whose one-line message names the file (or
// setting), the JSON key or line, and what is wrong with it. Also the tokenizer.json layouts beyond
// GPT-2's that load (Split regex, ignore_merges, TemplateProcessing, the NFC normalizer).
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/byte_level.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// testing::error_of, also checking that the message is one line.
std::string error_of(const std::function<void()>& action) {
  std::string message = testing::error_of(action);
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  return message;
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// A small OpenAI-format vocabulary in `dir`: the 256 byte tokens, "he", "ll", <|endoftext|>,
// and the merges given (vocab.bpe lines after the #version line).
void write_openai_vocab(const fs::path& dir, const std::string& merge_lines) {
  json encoder = json::object();
  for (int b = 0; b < 256; ++b) encoder[byte_level_encode(std::string(1, char(b)))] = b;
  encoder["he"] = 256;
  encoder["ll"] = 257;
  encoder["<|endoftext|>"] = 258;
  testing::write_text(dir / "encoder.json", encoder.dump());
  testing::write_text(dir / "vocab.bpe", "#version: 0.2\n" + merge_lines);
}

// tokenizer.json for the small vocabulary, after `edit` changes its JSON.
fs::path write_hf_json(const fs::path& dir, const std::function<void(json&)>& edit) {
  write_openai_vocab(dir, "h e\nl l\n");
  Tokenizer::load(dir / "encoder.json").save_json(dir / "saved.json");
  json doc = json::parse(testing::read_text(dir / "saved.json"));
  edit(doc);
  testing::write_text(dir / "tokenizer.json", doc.dump());
  return dir / "tokenizer.json";
}

TEST(TokenizerFiles, SmallOpenAiVocabularyLoads) {
  fs::path dir = testing::scratch_dir();
  write_openai_vocab(dir, "h e\nl l\n");
  for (const fs::path& path : {dir, dir / "encoder.json", dir / "vocab.bpe"}) {
    Tokenizer tok = Tokenizer::load(path);
    EXPECT_EQ(tok.encode("hello<|endoftext|>"), (std::vector<int32_t>{256, 257, 'o', 258}));
    EXPECT_EQ(tok.vocab_size(), 259);
  }
  fs::path hf = write_hf_json(dir, [](json&) {});
  EXPECT_EQ(Tokenizer::load(hf).encode("hello<|endoftext|>"), (std::vector<int32_t>{256, 257, 'o', 258}));
}

TEST(TokenizerErrors, MissingPathOrEmptyFolder) {
  fs::path dir = testing::scratch_dir();
  std::string message = error_of([&] { Tokenizer::load(dir / "absent"); });
  EXPECT_CONTAINS(message, (dir / "absent").string());
  message = error_of([&] { Tokenizer::load(dir); });
  EXPECT_CONTAINS(message, dir.string());
  EXPECT_CONTAINS(message, "tokenizer.json");
}

TEST(TokenizerErrors, BrokenJson) {
  fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "tokenizer.json", "{\"model\": {\"vocab\": ");
  std::string message = error_of([&] { Tokenizer::load(dir); });
  EXPECT_CONTAINS(message, (dir / "tokenizer.json").string());
  EXPECT_CONTAINS(message, "not valid JSON");
  fs::create_directories(dir / "openai");
  write_openai_vocab(dir / "openai", "h e\n");
  testing::write_text(dir / "openai" / "encoder.json", "[1, 2,");
  message = error_of([&] { Tokenizer::load(dir / "openai"); });
  EXPECT_CONTAINS(message, (dir / "openai" / "encoder.json").string());
}

TEST(TokenizerErrors, EncoderJsonWithoutVocabBpe) {
  fs::path dir = testing::scratch_dir();
  write_openai_vocab(dir, "h e\n");
  fs::remove(dir / "vocab.bpe");
  std::string message = error_of([&] { Tokenizer::load(dir); });
  EXPECT_CONTAINS(message, (dir / "vocab.bpe").string());
  EXPECT_CONTAINS(message, "missing");
}

TEST(TokenizerErrors, MergeLinesWithUnknownTokensOrBadShape) {
  fs::path dir = testing::scratch_dir();
  write_openai_vocab(dir, "h e\nhx yz\n");
  std::string message = error_of([&] { Tokenizer::load(dir); });
  EXPECT_CONTAINS(message, (dir / "vocab.bpe").string() + " line 3");
  EXPECT_CONTAINS(message, "'hx'");
  write_openai_vocab(dir, "h e\ne l\n");  // both known, but "el" is not a token
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(dir); }), "merged token 'el'");
  write_openai_vocab(dir, "h e\nl l l\n");
  message = error_of([&] { Tokenizer::load(dir); });
  EXPECT_CONTAINS(message, "line 3");
  EXPECT_CONTAINS(message, "two tokens");
}

TEST(TokenizerErrors, UnsupportedOrInconsistentTokenizerJson) {
  fs::path dir = testing::scratch_dir();
  fs::path file = write_hf_json(dir, [](json& doc) { doc["pre_tokenizer"] = {{"type", "Metaspace"}}; });
  std::string message = error_of([&] { Tokenizer::load(file); });
  EXPECT_CONTAINS(message, file.string());
  EXPECT_CONTAINS(message, "Metaspace");
  write_hf_json(dir, [](json& doc) { doc["model"]["type"] = "WordPiece"; });
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }), "WordPiece");
  write_hf_json(dir, [](json& doc) { doc["model"]["vocab"].erase("ll"); });  // leaves a gap at id 257
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }), "no token has id 257");
  write_hf_json(dir, [](json& doc) { doc["model"]["merges"].push_back("Ġ q"); });
  message = error_of([&] { Tokenizer::load(file); });
  EXPECT_CONTAINS(message, "model.merges[2]");
  EXPECT_CONTAINS(message, "'Ġq'");
  write_hf_json(dir, [](json& doc) { doc["model"]["vocab"]["h"] = "seven"; });
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }), "not an integer");
  write_hf_json(dir, [](json& doc) { doc["added_tokens"][0]["lstrip"] = true; });
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }), "lstrip");
}

// Llama 3's pre_tokenizer layout around `split` (a Split step).
json llama_pre_tokenizer(const json& split) {
  return {
      {"type", "Sequence"},
      {"pretokenizers",
       {split, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

json regex_split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

TEST(TokenizerFiles, SplitRegexAndTemplateLoad) {
  fs::path dir = testing::scratch_dir();
  fs::path file = write_hf_json(dir, [](json& doc) {
    doc["pre_tokenizer"] = llama_pre_tokenizer(regex_split(std::string(kCl100kPattern)));
    doc["model"]["ignore_merges"] = true;
    doc["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens",
         {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {258}}, {"tokens", {"<|endoftext|>"}}}}}}};
  });
  Tokenizer tok = Tokenizer::load(file);
  EXPECT_EQ(tok.rules().pretokenizer.pattern(), kCl100kPattern);
  EXPECT_TRUE(tok.rules().ignore_merges);
  EXPECT_EQ(tok.bos_token(), std::optional<int32_t>(258));
  EXPECT_EQ(tok.encode_with_special_tokens("hello"), (std::vector<int32_t>{258, 256, 257, 'o'}));
}

// Qwen2's NFC normalizer: a decomposed letter encodes as its composed form, special tokens are
// matched before normalisation, the normalizer survives a save, and any other normalizer is refused.
TEST(TokenizerFiles, NfcNormalizerComposesBeforeEncoding) {
  fs::path dir = testing::scratch_dir();
  fs::path file = write_hf_json(dir, [](json& doc) { doc["normalizer"] = {{"type", "NFC"}}; });
  const Tokenizer tok = Tokenizer::load(file);
  EXPECT_TRUE(tok.rules().nfc);
  const std::string composed = "h\xC3\xA9", decomposed = "he\xCC\x81";  // hé: U+00E9, and e + U+0301
  EXPECT_EQ(tok.encode(decomposed), tok.encode(composed));
  EXPECT_EQ(tok.decode(tok.encode(decomposed)), composed);
  EXPECT_EQ(tok.encode(std::string("<|endoftext|>").append(decomposed)).front(), 258);
  tok.save_json(dir / "again.json");
  EXPECT_TRUE(Tokenizer::load(dir / "again.json").rules().nfc);
  EXPECT_NE(Tokenizer::load(dir / "saved.json").encode(decomposed), tok.encode(decomposed));  // without NFC
  write_hf_json(dir, [](json& doc) { doc["normalizer"] = {{"type", "NFKC"}}; });
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }),
                  "normalizer NFKC is not supported; Tessera applies NFC or no normalisation");
}

TEST(TokenizerErrors, UnknownPreTokenizerOrBadRegex) {
  fs::path dir = testing::scratch_dir();
  fs::path file = dir / "tokenizer.json";
  auto expect_error = [&](const std::function<void(json&)>& edit, const std::vector<std::string>& parts) {
    write_hf_json(dir, edit);
    std::string message = error_of([&] { Tokenizer::load(file); });
    EXPECT_CONTAINS(message, file.string());
    for (const std::string& part : parts) EXPECT_CONTAINS(message, part);
  };
  expect_error([](json& doc) { doc["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"pre_tokenizer type Whitespace"});
  expect_error([](json& doc) { doc.erase("pre_tokenizer"); }, {"no pre_tokenizer"});
  expect_error(
      [](json& doc) {
        doc["pre_tokenizer"] = llama_pre_tokenizer({{"type", "Digits"}});
      },
      {"pre_tokenizer.pretokenizers[0] type Digits"});
  expect_error([](json& doc) { doc["pre_tokenizer"] = llama_pre_tokenizer(regex_split("(?i:'s|[a-")); },
               {"pre_tokenizer.pretokenizers[0].pattern.Regex", "PCRE2 cannot compile", "offset"});
  expect_error([](json& doc) { doc["pre_tokenizer"] = llama_pre_tokenizer(regex_split("a{2,1}")); },
               {"pre_tokenizer.pretokenizers[0].pattern.Regex"});
  expect_error(
      [](json& doc) {
        json split = regex_split("\\s+");
        split["behavior"] = "Removed";
        doc["pre_tokenizer"] = llama_pre_tokenizer(split);
      },
      {"pre_tokenizer.pretokenizers[0].behavior", "Removed"});
  expect_error(
      [](json& doc) {
        json split = regex_split("x");
        split["pattern"] = {{"String", " "}};
        doc["pre_tokenizer"] = llama_pre_tokenizer(split);
      },
      {"pre_tokenizer.pretokenizers[0].pattern", "Regex"});
  expect_error([](json& doc) { doc["pre_tokenizer"]["use_regex"] = false; }, {"use_regex false"});
  expect_error([](json& doc) { doc["pre_tokenizer"]["add_prefix_space"] = true; }, {"add_prefix_space"});
  expect_error(
      [](json& doc) {
        doc["post_processor"] = {{"type", "RobertaProcessing"}};
      },
      {"post_processor type RobertaProcessing"});
  expect_error(
      [](json& doc) {
        doc["post_processor"] = {{"type", "TemplateProcessing"},
                                 {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                                 {"special_tokens", json::object()}};
      },
      {"post_processor.single[0]", "'<s>'"});
  expect_error([](json& doc) { doc["model"]["byte_fallback"] = true; },
               {"normalizer 'null' is not supported with byte fallback", "Replace"});
}

TEST(TokenizerErrors, BadTiktokenFiles) {
  fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "mine.tiktoken", "IQ== 0\n");
  std::string message = error_of([&] { Tokenizer::load(dir / "mine.tiktoken"); });
  EXPECT_CONTAINS(message, (dir / "mine.tiktoken").string());
  EXPECT_CONTAINS(message, "cl100k_base.tiktoken");
  fs::path file = dir / "cl100k_base.tiktoken";
  testing::write_text(file, "IQ== 0\nIg== seven\n");
  message = error_of([&] { Tokenizer::load(file); });
  EXPECT_CONTAINS(message, file.string() + " line 2");
  EXPECT_CONTAINS(message, "seven");
  testing::write_text(file, "IQ== 0\n!!!! 1\n");
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }), "line 2");
  testing::write_text(file, "IQ== 0\nIg== 0\n");
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }), "rank 0 is given to two tokens");
  testing::write_text(file, "IQ== 0\nIg== 999999999\n");
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }), "rank 999999999 leaves more than 1024");
  testing::write_text(file, "IQ== 0\n");  // one token: the byte 0x00 has none
  EXPECT_CONTAINS(error_of([&] { Tokenizer::load(file); }), "no token for byte 0x0");
}

TEST(BpeTrainerErrors, VocabTooSmallOrMissingText) {
  fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "text.txt", "hello hello");
  EXPECT_CONTAINS(error_of([&] { train_bpe({dir / "text.txt"}, 257); }), "257");
  EXPECT_CONTAINS(error_of([&] { train_bpe({dir / "absent.txt"}, 300); }), (dir / "absent.txt").string());
  EXPECT_CONTAINS(error_of([&] { train_bpe({}, 300); }), "text file");
}

TEST(TokenizerErrors, SaveIntoMissingFolder) {
  fs::path dir = testing::scratch_dir();
  write_openai_vocab(dir, "h e\n");
  Tokenizer tok = Tokenizer::load(dir);
  EXPECT_CONTAINS(error_of([&] { tok.save_json(dir / "absent" / "tokenizer.json"); }),
                  (dir / "absent" / "tokenizer.json").string());
}

}  // namespace
}  // namespace tessera
