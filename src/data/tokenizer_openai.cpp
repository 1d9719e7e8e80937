// OpenAI's GPT-2 vocabulary files: encoder.json maps byte-level token text to ids, and vocab.bpe
// lists one merge per line ("Ġ t") in rank order after a "#version" line. <|endoftext|>, when the
// vocabulary has it, is the one special token of this format.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "data/tokenizer_files.h"
#include "data/whole_file.h"

namespace tessera::vocab_files {

Tokenizer load_openai_files(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe) {
  TextVocab vocab(parse_json_file(encoder_json), {}, encoder_json.string());
  std::string text = read_whole_file(vocab_bpe, "tokenizer file", kMaxTokenizerFileBytes);
  std::vector<BpeMerge> merges;
  for_each_line(text, [&](std::string_view line, size_t line_number) {
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) return;
    merges.push_back(vocab.merge_line(line, vocab_bpe.string() + " line " + std::to_string(line_number)));
  });
  std::vector<SpecialToken> specials;
  if (vocab.contains(kEndOfText)) specials.push_back({std::string(kEndOfText), vocab.id(kEndOfText)});
  return Tokenizer(vocab.take_tokens(), std::move(merges), std::move(specials), encoder_json.string());
}

}  // namespace tessera::vocab_files
