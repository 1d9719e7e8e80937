// BPE tokenizer: byte-level (GPT-2, Llama 3, tiktoken's cl100k/o200k) or SentencePiece's with byte
// fallback (Llama 2, Mistral 7B, Gemma). Reads OpenAI's encoder.json + vocab.bpe, a Hugging Face
// tokenizer.json or a tiktoken rank file, writes tokenizer.json. Special tokens are matched whole in
// the text; the rest is pre-tokenised with the vocabulary's pattern (or at spaces, SentencePiece's)
// and each piece merged by rank (after NFC normalisation when the vocabulary asks for it, as Qwen2's
// does). decode(encode(s)) == s for any bytes (in NFC, for those; with "▁" as a space, for
// SentencePiece's). Immutable after construction, so encode/decode are safe to call from many threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/bpe_merger.h"
#include "data/pretokenizer.h"

namespace tessera {

inline constexpr std::string_view kEndOfText = "<|endoftext|>";         // GPT-2, cl100k, o200k
inline constexpr std::string_view kLlamaEndOfText = "<|end_of_text|>";  // Llama 3

// Transparent hashing, so a map keyed by std::string can be searched with a string_view.
struct TextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A token recognised as a whole wherever its text occurs in the input (e.g. <|endoftext|>).
struct SpecialToken {
  std::string text;
  int32_t id = 0;
};

// What a vocabulary does besides merging: how text is cut into pieces, whether a piece that is
// itself a token skips merging, and what goes around a text when special tokens are added.
// The defaults are GPT-2's.
struct EncodingRules {
  Pretokenizer pretokenizer;  // GPT-2's pattern unless given another
  // A piece whose bytes are one (non-special) token becomes that token without merging: Hugging
  // Face's ignore_merges (Llama 3), and always so in tiktoken.
  bool ignore_merges = false;
  // The ids put before and after a text by encode_with_special_tokens (tokenizer.json's
  // post_processor; Llama 3: <|begin_of_text|> before, nothing after).
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
  // tokenizer.json's NFC normalizer (Qwen2): text between special tokens is put in Unicode NFC
  // before it is cut into pieces.
  bool nfc = false;
  // merge_ranks[r] is the rank of merges[r] (lower merges first); empty: the rank is r. tiktoken
  // ranks a merge by the token it makes, so merges making one token share a rank.
  std::vector<int32_t> merge_ranks;
  // SentencePiece's BPE as tokenizer.json holds it (Llama 2, Mistral 7B, Gemma): the ids of the
  // <0x00>..<0xFF> tokens by byte (byte_fallback), empty for a byte-level vocabulary. Its tokens'
  // "▁" are spaces here; a piece starts as the vocabulary's characters, one it lacks as its UTF-8
  // bytes' tokens, and "▁" in the text is a space. Pieces end before each space that follows another
  // character when no token spans such a place, else the text between special tokens is one piece.
  std::vector<int32_t> fallback_bytes;
  // The space SentencePiece puts before a text (none: Gemma's): before each text between special
  // tokens (Llama 2's Prepend normalizer), or as a Metaspace pre-tokenizer does, before each text
  // that does not start with one ("always") or before the input's first text only, unless it starts
  // with one ("first"). decode drops the first space of what it returns (their Strip decoder).
  enum class SpacePrefix { none, prepend, metaspace_always, metaspace_first };
  SpacePrefix space_prefix = SpacePrefix::none;
  bool split_at_every_space = false;  // a Metaspace pre-tokenizer's split: each space starts a piece
  bool sentencepiece() const { return !fallback_bytes.empty(); }
};

// Where a text starts, for the space a SentencePiece vocabulary may put before it (EncodingRules::space_prefix):
// at the input's start, right after a special token, or continuing text that came before it (a
// completion after its prompt, a chat turn's content after its header), which takes none.
enum class TextStart { input, after_special, continuing };

class Tokenizer {
 public:
  // tokens[id] holds the raw bytes of token id: every single byte must be some token's text
  // (rules.fallback_bytes', for SentencePiece's).
  // merges are in rank order unless rules.merge_ranks ranks them; every special's id must hold its
  // text. `source` (a file name) prefixes the errors about this vocabulary.
  Tokenizer(std::vector<std::string> tokens, std::vector<BpeMerge> merges, std::vector<SpecialToken> specials,
            std::string source, EncodingRules rules = {});

  // `path`: a tokenizer.json file, a tiktoken rank file (*.tiktoken), or a folder holding
  // tokenizer.json (read first when both are there) or OpenAI's encoder.json + vocab.bpe. Every
  // added token of tokenizer.json is special.
  static Tokenizer load(const std::filesystem::path& path);
  // Writes a Hugging Face tokenizer.json (BPE model; the pre-tokenizer pattern, ignore_merges and
  // post-processor of this vocabulary; byte-level decoder) through a temporary file renamed into place.
  void save_json(const std::filesystem::path& file) const;

  // The tokens of `text` alone: nothing is added around it (Hugging Face's add_special_tokens=false).
  // `start` says where it begins, for SentencePiece's space before it.
  std::vector<int32_t> encode(std::string_view text, TextStart start = TextStart::input) const;
  // rules().prefix + encode(text) + rules().suffix, as Hugging Face encodes with add_special_tokens.
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  // The raw bytes of one token (not necessarily valid UTF-8 on its own).
  std::string token_text(int32_t id) const;

  int64_t vocab_size() const { return int64_t(tokens_.size()); }
  // Id of <|endoftext|>, or else of Llama 3's <|end_of_text|>, SentencePiece's </s> or Gemma's <eos>;
  // throws when this vocabulary has none.
  int32_t eot_token() const;
  bool has_eot_token() const { return eot_ >= 0; }
  // The token the post-processor puts first (Llama 3: <|begin_of_text|>); nullopt when it adds none
  // (GPT-2). A data pipeline starts each document with it when there is one.
  std::optional<int32_t> bos_token() const;
  // What a document starts with: the BOS when there is one, else the end-of-text token (GPT-2's
  // documents are separated by it). Shards are written so, and generation starts from it.
  int32_t document_start_token() const { return bos_token().value_or(eot_token()); }
  const EncodingRules& rules() const { return rules_; }
  const std::vector<SpecialToken>& special_tokens() const { return specials_; }
  bool is_special(int32_t id) const { return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]; }
  // The id of the special token whose text is `text`, if there is one.
  std::optional<int32_t> special_token_id(std::string_view text) const;
  const std::vector<BpeMerge>& merges() const { return merges_; }
  const std::string& source() const { return source_; }

 private:
  struct PieceCache;
  void encode_ordinary(std::string_view text, TextStart start, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // A SentencePiece piece's first tokens: its characters', or their bytes'.
  std::vector<int32_t> sentencepiece_symbols(std::string_view piece) const;
  void check_id(int32_t id) const;

  std::vector<std::string> tokens_;
  std::vector<BpeMerge> merges_;
  std::vector<SpecialToken> specials_;
  std::string source_;
  EncodingRules rules_;
  int32_t byte_token_[256] = {};
  int32_t eot_ = -1;
  BpeMerger merger_;
  // ignore_merges: the non-special tokens by their bytes.
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> whole_tokens_;
  // SentencePiece's: the tokens of one character (other than the byte tokens), and whether pieces
  // may end before a space that follows another character (no token holds such a pair).
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> char_tokens_;
  bool split_at_spaces_ = false;
  std::shared_ptr<PieceCache> cache_;  // merged pieces; shared by copies, which have the same rules
  std::vector<bool> special_;          // by id: whether the token is special
};

}  // namespace tessera
