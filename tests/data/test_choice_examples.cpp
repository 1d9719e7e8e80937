// Multiple-choice JSON lines into token examples: HellaSwag's schema (a label as a number or a
// string of digits) and the generic one give the same examples; the context follows the document
// start token and every choice is encoded on its own after a space; blank lines are skipped; every
// defect names its line and the fix.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/bpe_trainer.h"
#include "data/choice_examples.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::expect_error_with;

class ChoiceExamples : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 30; ++i) text += "A man is sitting on a roof. He starts pulling up roofing, then he is done.\n";
    testing::write_text(dir / "train.txt", text);
    tokenizer = std::make_unique<Tokenizer>(train_bpe({dir / "train.txt"}, 300));
  }
  // `lines` written as a file; its examples.
  std::vector<ChoiceExample> read(const std::string& lines) {
    testing::write_text(dir / "choices.jsonl", lines);
    return read_choice_examples(dir / "choices.jsonl", *tokenizer);
  }
  // The error reading `lines` gives holds each of `parts`.
  void expect_refused(const std::string& lines, const std::vector<std::string>& parts) {
    testing::write_text(dir / "choices.jsonl", lines);
    expect_error_with([&] { read_choice_examples(dir / "choices.jsonl", *tokenizer); }, parts);
  }
  fs::path dir = testing::scratch_dir();
  std::unique_ptr<Tokenizer> tokenizer;
};

TEST_F(ChoiceExamples, BothSchemasGiveTheSameTokens) {
  const nlohmann::json hellaswag = {{"ind", 4}, {"ctx", "A man is sitting on a roof. He"},
                                    {"endings", {"starts pulling up roofing.", "is done.", "then he", "roof"}},
                                    {"label", "1"}, {"split", "val"}};
  const nlohmann::json generic = {{"context", "A man is sitting on a roof. He"},
                                  {"choices", {"starts pulling up roofing.", "is done.", "then he", "roof"}},
                                  {"label", 1}};
  const std::vector<ChoiceExample> examples = read(hellaswag.dump() + "\n\n" + generic.dump() + "\n");
  ASSERT_EQ(examples.size(), 2u);
  std::vector<int32_t> context = {tokenizer->document_start_token()};
  for (int32_t t : tokenizer->encode("A man is sitting on a roof. He")) context.push_back(t);
  for (const ChoiceExample& x : examples) {
    EXPECT_EQ(x.context, context);
    ASSERT_EQ(x.choices.size(), 4u);
    EXPECT_EQ(x.choices[0], tokenizer->encode(" starts pulling up roofing."));
    EXPECT_EQ(x.choices[3], tokenizer->encode(" roof"));
    EXPECT_EQ(x.label, 1);
  }
  EXPECT_EQ(examples[0].line, 1);
  EXPECT_EQ(examples[1].line, 3);  // after a blank line
}

TEST_F(ChoiceExamples, DefectsNameTheLineAndTheFix) {
  const std::string good = R"({"context": "He", "choices": ["a", "b"], "label": 0})" "\n";
  expect_refused(good + "[1, 2]\n", {"choices.jsonl' line 2", "not a JSON object"});
  expect_refused(good + R"({"ctx": "He", "label": 0})" "\n",
                 {"line 2: neither \"endings\"", "\"context\", \"choices\", \"label\""});
  expect_refused(R"({"choices": ["a", "b"], "label": 0})" "\n", {"line 1: no string under \"context\""});
  expect_refused(R"({"ctx": 3, "endings": ["a", "b"], "label": 0})" "\n", {"line 1: no string under \"ctx\""});
  expect_refused(R"({"context": "He", "choices": ["a"], "label": 0})" "\n",
                 {"line 1: \"choices\" must be a list of two or more strings"});
  expect_refused(R"({"context": "He", "choices": "a b", "label": 0})" "\n", {"must be a list of two or more"});
  expect_refused(R"({"context": "He", "choices": ["a", ""], "label": 0})" "\n",
                 {"line 1: choice 1 of \"choices\" is '\"\"', not a non-empty string"});
  expect_refused(R"({"context": "He", "choices": ["a", 7], "label": 0})" "\n", {"choice 1 of \"choices\" is '7'"});
  expect_refused(R"({"ctx": "He", "endings": ["a", "b"], "label": ""})" "\n",
                 {"line 1: \"label\" '\"\"' is not the index of one of its 2 choices (0 to 1)"});
  expect_refused(good + R"({"ctx": "He", "endings": ["a", "b"], "label": 2})" "\n",
                 {"line 2: \"label\" '2' is not the index"});
  expect_refused(R"({"ctx": "He", "endings": ["a", "b"], "label": -1})" "\n", {"\"label\" '-1' is not the index"});
  expect_refused(R"({"ctx": "He", "endings": ["a", "b"], "label": "x1"})" "\n", {"\"label\" '\"x1\"' is not"});
  expect_refused(R"({"ctx": "He", "endings": ["a", "b"], "label": 0.5})" "\n", {"\"label\" '0.5' is not"});
  expect_refused(R"({"ctx": "He", "endings": ["a", "b"]})" "\n", {"line 1: no \"label\"", "use the validation split"});
  expect_refused("\n  \n", {"holds no examples", "{\"context\": \"...\", \"choices\""});
  expect_error_with([&] { read_choice_examples(dir / "missing.jsonl", *tokenizer); }, {"missing.jsonl"});
}

}  // namespace
}  // namespace tessera
