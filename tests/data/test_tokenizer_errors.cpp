// Bad tokenizer input: each case throws tessera::Error whose one-line message names the file (or
// setting) and what is wrong with it.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

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
