// Reads multiple-choice JSON lines (HellaSwag's schema or the generic one) into token examples,
// every defect named by its file and line.
#include "data/choice_examples.h"

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/user_text.h"
#include "data/document_reader.h"
#include "data/json_excerpt.h"
#include "data/json_line.h"

namespace tessera {
namespace {

// The keys of one schema: the context's and the choices'.
struct ChoiceSchema {
  const char* context;
  const char* choices;
};
constexpr ChoiceSchema kHellaSwag{"ctx", "endings"};
constexpr ChoiceSchema kGeneric{"context", "choices"};

// The label of `record` as an index below `choices`: a number, or a string of digits.
int64_t label_of(const nlohmann::json& record, size_t choices, const std::string& where) {
  const auto label = record.find("label");
  TS_CHECK(label != record.end(), where, ": no \"label\" (the right choice's index from 0); a test split without "
           "labels cannot be scored, use the validation split");
  int64_t index = -1;
  if (label->is_number_integer()) {
    index = label->get<int64_t>();
  } else if (label->is_string()) {
    const std::string text = label->get<std::string>();
    if (!text.empty() && text.size() < 10 && text.find_first_not_of("0123456789") == std::string::npos)
      index = std::stoll(text);
  }
  TS_CHECK(index >= 0 && index < int64_t(choices), where, ": \"label\" ", json_excerpt(*label),
           " is not the index of one of its ", choices, " choices (0 to ", choices - 1, ")");
  return index;
}

ChoiceExample example_of(const nlohmann::json& record, const Tokenizer& tokenizer, const std::string& where) {
  const ChoiceSchema& schema = record.contains(kHellaSwag.choices) ? kHellaSwag : kGeneric;
  const auto context = record.find(schema.context);
  const auto choices = record.find(schema.choices);
  TS_CHECK(choices != record.end(), where, ": neither \"endings\" (HellaSwag: \"ctx\", \"endings\", \"label\") nor "
           "\"choices\" (\"context\", \"choices\", \"label\"); write each example with one of those schemas");
  TS_CHECK(context != record.end() && context->is_string(), where, ": no string under \"", schema.context,
           "\", the text the choices continue");
  TS_CHECK(choices->is_array() && choices->size() >= 2, where, ": \"", schema.choices, "\" must be a list of two or "
           "more strings, got ", json_excerpt(*choices));
  ChoiceExample example;
  example.context.push_back(tokenizer.document_start_token());
  const std::vector<int32_t> context_tokens = tokenizer.encode(context->get<std::string>());
  example.context.insert(example.context.end(), context_tokens.begin(), context_tokens.end());
  for (const nlohmann::json& choice : *choices) {
    TS_CHECK(choice.is_string() && !choice.get<std::string>().empty(), where, ": choice ", example.choices.size(),
             " of \"", schema.choices, "\" is ", json_excerpt(choice), ", not a non-empty string");
    std::string text = " ";  // appended, not " " + choice: GCC 12 warns of a false overlap on that
    text += choice.get_ref<const std::string&>();
    example.choices.push_back(tokenizer.encode(text, TextStart::continuing));  // no SentencePiece space added
  }
  example.label = label_of(record, choices->size(), where);
  return example;
}

}  // namespace

std::vector<ChoiceExample> read_choice_examples(const std::filesystem::path& file, const Tokenizer& tokenizer) {
  DocumentOptions options;
  options.format = "jsonl";
  DocumentReader reader(file, options);
  std::vector<ChoiceExample> examples;
  DocumentRecord record;
  while (reader.next_record(record)) {
    const nlohmann::json j = parse_json_line(record.bytes, file, record.line);
    examples.push_back(example_of(j, tokenizer, json_line_place(file, record.line)));
    examples.back().line = record.line;
  }
  TS_CHECK(!examples.empty(), "multiple-choice file ", quoted_text(file.string()), " holds no examples; each line "
           "is one JSON object such as {\"context\": \"...\", \"choices\": [\"...\", \"...\"], \"label\": 0}");
  return examples;
}

}  // namespace tessera
