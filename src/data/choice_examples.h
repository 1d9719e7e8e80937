// Multiple-choice examples (HellaSwag and tasks like it) from a JSON lines file, tokenized for
// scoring: each line holds a context, two or more choices that could continue it, and the index of
// the right one. Two schemas are read: HellaSwag's own ("ctx", "endings", "label", as its
// hellaswag_val.jsonl and Hugging Face's Rowan/hellaswag ship it, the label a number or a string of
// digits) and a generic one ("context", "choices", "label"). As llm.c and lm-evaluation-harness
// do, a choice is encoded on its own after one space; the context follows the tokenizer's document
// start token, as every document the tokenize command writes does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "data/tokenizer.h"

namespace tessera {

struct ChoiceExample {
  std::vector<int32_t> context;               // the document start token, then the context's tokens
  std::vector<std::vector<int32_t>> choices;  // each choice's tokens (" " + its text), none empty
  int64_t label = 0;                          // the right choice's index
  int64_t line = 0;                           // where it is in its file, for messages
};

// Every example of `file` (plain or *.gz). Throws naming the file, the line and the fix for a line
// that is not a JSON object, lacks a schema's keys, holds fewer than two choices or an empty one,
// or a label outside its choices; and for a file without examples.
std::vector<ChoiceExample> read_choice_examples(const std::filesystem::path& file, const Tokenizer& tokenizer);

}  // namespace tessera
