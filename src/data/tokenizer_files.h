// Reading vocabulary files (internal to src/data): the parts shared by OpenAI's encoder.json +
// vocab.bpe and Hugging Face's tokenizer.json, and one loader per format (tiktoken's too). Every error names the
// file, and the line or JSON entry, that is wrong.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace tessera::vocab_files {

// Parses `file` as JSON; a read or syntax error names the file.
nlohmann::json parse_json_file(const std::filesystem::path& file);

// How a vocabulary file spells its tokens' bytes: in GPT-2's byte-level alphabet, or as SentencePiece
// does (a space is "▁", and with byte fallback <0x41> is the byte 0x41).
enum class TokenSpelling { byte_level, sentencepiece };

// SentencePiece's spelling of a byte token: <0x41>.
std::string byte_token_text(int byte);

// A vocabulary as its file spells it: a JSON object {token text: id}. Ids must run from 0 without gaps.
class TextVocab {
 public:
  // `added` (id -> plain text) gives tokens written as plain text, not in the vocabulary's spelling
  // (Hugging Face's added_tokens); they may extend the vocabulary or restate one of its ids.
  TextVocab(const nlohmann::json& vocab, const std::map<int32_t, std::string>& added, std::string file,
            TokenSpelling spelling = TokenSpelling::byte_level);

  // The merge of two tokens spelled as in a merges list; `where` locates the entry ("vocab.bpe
  // line 7") for the error when a token is unknown.
  BpeMerge merge(std::string_view left, std::string_view right, const std::string& where) const;
  // The same for one "left right" line, as vocab.bpe and older tokenizer.json files write merges.
  BpeMerge merge_line(std::string_view line, const std::string& where) const;

  bool contains(std::string_view text) const { return ids_.find(std::string(text)) != ids_.end(); }
  int32_t id(std::string_view text) const { return ids_.at(std::string(text)); }
  // SentencePiece's byte tokens <0x00>..<0xFF>: their ids by byte.
  std::vector<int32_t> byte_token_ids() const;

  // The raw bytes of every token, by id; leaves this object empty.
  std::vector<std::string> take_tokens() { return std::move(tokens_); }

 private:
  std::string file_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> tokens_;
};

Tokenizer load_openai_files(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe);
Tokenizer load_hf_json(const std::filesystem::path& file);
// A tiktoken rank file named after its encoding (cl100k_base.tiktoken, o200k_base.tiktoken).
Tokenizer load_tiktoken(const std::filesystem::path& file);

}  // namespace tessera::vocab_files
