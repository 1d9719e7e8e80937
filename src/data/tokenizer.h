// Byte-level BPE tokenizer, GPT-2 compatible: reads OpenAI's encoder.json + vocab.bpe or a Hugging
// Face tokenizer.json, writes tokenizer.json. Special tokens are matched whole in the text; the rest
// is pre-tokenised with GPT-2's pattern and each piece merged by rank. decode(encode(s)) == s for
// any bytes. Immutable after construction, so encode/decode are safe to call from many threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_merger.h"
#include "data/pretokenizer.h"

namespace tessera {

inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// A token recognised as a whole wherever its text occurs in the input (e.g. <|endoftext|>).
struct SpecialToken {
  std::string text;
  int32_t id = 0;
};

class Tokenizer {
 public:
  // tokens[id] holds the raw bytes of token id: every single byte must be some token's text.
  // merges are in rank order; every special's id must hold its text. `source` (a file name)
  // prefixes the errors about this vocabulary.
  Tokenizer(std::vector<std::string> tokens, std::vector<BpeMerge> merges, std::vector<SpecialToken> specials,
            std::string source);

  // `path`: a tokenizer.json file, or a folder holding tokenizer.json (read first when both are
  // there) or OpenAI's encoder.json + vocab.bpe. Every added token of tokenizer.json is special.
  static Tokenizer load(const std::filesystem::path& path);
  // Writes a Hugging Face tokenizer.json (BPE model, byte-level pre-tokenizer and decoder) through
  // a temporary file renamed into place.
  void save_json(const std::filesystem::path& file) const;

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  // The raw bytes of one token (not necessarily valid UTF-8 on its own).
  std::string token_text(int32_t id) const;

  int64_t vocab_size() const { return int64_t(tokens_.size()); }
  // Id of <|endoftext|>; throws when this vocabulary has none.
  int32_t eot_token() const;
  const std::vector<SpecialToken>& special_tokens() const { return specials_; }
  const std::vector<BpeMerge>& merges() const { return merges_; }
  const std::string& source() const { return source_; }

 private:
  struct PieceCache;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void check_id(int32_t id) const;

  std::vector<std::string> tokens_;
  std::vector<BpeMerge> merges_;
  std::vector<SpecialToken> specials_;
  std::string source_;
  int32_t byte_token_[256] = {};
  int32_t eot_ = -1;
  BpeMerger merger_;
  Pretokenizer pretokenizer_;
  std::shared_ptr<PieceCache> cache_;  // merged pieces; shared by copies, which have the same rules
};

}  // namespace tessera
