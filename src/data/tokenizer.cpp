// Tokenizer construction (vocabulary checks), encoding and decoding. Merged pieces are cached:
// natural text repeats its words, so most pieces skip BPE after the first few kilobytes.
// With ignore_merges a piece that is a whole token is looked up before the cache and BPE.
// A SentencePiece vocabulary's text becomes pieces at its spaces and starts BPE from characters.
#include "data/tokenizer.h"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "core/error.h"
#include "data/metaspace.h"
#include "data/unicode_nfc.h"
#include "data/utf8_char.h"

namespace tessera {
namespace {

// The cache is emptied when it grows past this many pieces, bounding its memory on huge corpora;
// longer pieces (a SentencePiece text that cannot be cut at its spaces) are not kept.
constexpr size_t kMaxCachedPieces = size_t(1) << 20;
constexpr size_t kMaxCachedPieceBytes = 256;

// The end-of-text tokens a vocabulary may have, the first one present taking the role.
constexpr std::string_view kEndOfTextNames[] = {kEndOfText, kLlamaEndOfText, "</s>", "<eos>"};

}  // namespace

struct Tokenizer::PieceCache {
  std::shared_mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>, TextHash, std::equal_to<>> pieces;
};

Tokenizer::Tokenizer(std::vector<std::string> tokens, std::vector<BpeMerge> merges, std::vector<SpecialToken> specials,
                     std::string source, EncodingRules rules)
    : tokens_(std::move(tokens)),
      merges_(std::move(merges)),
      specials_(std::move(specials)),
      source_(std::move(source)),
      rules_(std::move(rules)),
      cache_(std::make_shared<PieceCache>()) {
  const auto n = int64_t(tokens_.size());
  TS_CHECK(n > 0 && n < int64_t(INT32_MAX), source_, ": vocabulary size ", n, " is out of range");
  size_t eot_rank = std::size(kEndOfTextNames);
  special_.assign(size_t(n), false);
  for (const SpecialToken& s : specials_) {
    TS_CHECK(!s.text.empty(), source_, ": special token ", s.id, " has empty text");
    TS_CHECK(s.id >= 0 && s.id < n && tokens_[size_t(s.id)] == s.text, source_, ": special token '", s.text,
             "' must have an id in [0, ", n, ") whose token is its text; got id ", s.id);
    special_[size_t(s.id)] = true;
    for (size_t rank = 0; rank < eot_rank; ++rank)
      if (s.text == kEndOfTextNames[rank]) eot_rank = rank, eot_ = s.id;
  }
  for (const auto* ids : {&rules_.prefix, &rules_.suffix})
    for (int32_t id : *ids)
      TS_CHECK(id >= 0 && id < n, source_, ": the post-processor adds token id ", id, ", outside [0, ", n, ")");
  TS_CHECK(rules_.merge_ranks.empty() || rules_.merge_ranks.size() == merges_.size(), source_, ": ",
           rules_.merge_ranks.size(), " merge ranks for ", merges_.size(), " merges");
  std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
  std::vector<bool> fallback(size_t(n), false);
  if (rules_.sentencepiece()) {
    TS_CHECK(rules_.fallback_bytes.size() == 256, source_, ": ", rules_.fallback_bytes.size(),
             " byte tokens; byte fallback needs one for each of the 256 bytes");
    for (int b = 0; b < 256; ++b) {
      const int32_t id = rules_.fallback_bytes[size_t(b)];
      TS_CHECK(id >= 0 && id < n && tokens_[size_t(id)] == std::string(1, char(b)), source_, ": token ", id,
               " is not the byte token of 0x", std::hex, b);
      byte_token_[b] = id;
      fallback[size_t(id)] = true;
    }
  }
  for (int32_t id = int32_t(n) - 1; id >= 0 && !rules_.sentencepiece(); --id)  // the lowest id wins on repeats
    if (tokens_[size_t(id)].size() == 1) byte_token_[static_cast<unsigned char>(tokens_[size_t(id)][0])] = id;
  for (int b = 0; b < 256; ++b)
    TS_CHECK(byte_token_[b] >= 0, source_, ": no token for byte 0x", std::hex, b,
             "; a byte-level BPE vocabulary needs all 256 single-byte tokens");
  for (size_t r = 0; r < merges_.size(); ++r) {
    const BpeMerge& m = merges_[r];
    bool in_range = m.left >= 0 && m.left < n && m.right >= 0 && m.right < n && m.merged >= 0 && m.merged < n;
    TS_CHECK(in_range && tokens_[size_t(m.merged)] == tokens_[size_t(m.left)] + tokens_[size_t(m.right)], source_,
             ": merge ", r + 1, " (ids ", m.left, " + ", m.right, " -> ", m.merged,
             ") does not join two tokens into the third");
  }
  merger_ = BpeMerger(merges_, rules_.merge_ranks);
  if (rules_.ignore_merges) {
    whole_tokens_.reserve(size_t(n));
    for (int32_t id = 0; id < int32_t(n); ++id)  // the lowest id wins when bytes repeat
      if (!special_[size_t(id)] && !fallback[size_t(id)]) whole_tokens_.try_emplace(tokens_[size_t(id)], id);
  }
  if (!rules_.sentencepiece()) return;
  split_at_spaces_ = true;
  for (int32_t id = 0; id < int32_t(n); ++id) {
    if (special_[size_t(id)] || fallback[size_t(id)]) continue;
    const std::string& token = tokens_[size_t(id)];
    for (size_t i = 1; i < token.size() && split_at_spaces_; ++i)
      split_at_spaces_ = !(token[i] == ' ' && token[i - 1] != ' ');
    if (utf8_char_at(token, 0).length == int(token.size())) char_tokens_.try_emplace(token, id);
  }
}

int32_t Tokenizer::eot_token() const {
  TS_CHECK(eot_ >= 0, source_, ": this vocabulary has no end-of-text token (", kEndOfText, ", ", kLlamaEndOfText,
           ", </s> or <eos>)");
  return eot_;
}

std::optional<int32_t> Tokenizer::special_token_id(std::string_view text) const {
  for (const SpecialToken& special : specials_)
    if (special.text == text) return special.id;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::bos_token() const {
  if (rules_.prefix.empty()) return std::nullopt;
  return rules_.prefix.front();
}

void Tokenizer::check_id(int32_t id) const {
  TS_CHECK(id >= 0 && id < int32_t(tokens_.size()), "token id ", id, " is outside the vocabulary of ", source_,
           " (size ", tokens_.size(), ")");
}

std::string Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return tokens_[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id);
    out += tokens_[size_t(id)];
  }
  if (rules_.space_prefix != EncodingRules::SpacePrefix::none && out.starts_with(' ')) out.erase(0, 1);
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, TextStart start) const {
  constexpr size_t npos = std::string_view::npos;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  // next_at[k]: the next occurrence of special k at or after `done` (npos: none). It is searched
  // again only once `done` passes it, so each special costs one scan of the text overall.
  std::vector<size_t> next_at(specials_.size());
  for (size_t k = 0; k < specials_.size(); ++k) next_at[k] = text.find(specials_[k].text);
  size_t done = 0;
  while (true) {
    size_t at = npos;
    const SpecialToken* found = nullptr;  // the earliest special; the longest among those at `at`
    for (size_t k = 0; k < specials_.size(); ++k) {
      if (next_at[k] < done) next_at[k] = text.find(specials_[k].text, done);
      if (next_at[k] == npos) continue;
      if (next_at[k] < at || (next_at[k] == at && specials_[k].text.size() > found->text.size())) {
        at = next_at[k];
        found = &specials_[k];
      }
    }
    encode_ordinary(text.substr(done, at == npos ? npos : at - done), done == 0 ? start : TextStart::after_special,
                    out);
    if (found == nullptr) return out;
    out.push_back(found->id);
    done = at + found->text.size();
  }
}

std::vector<int32_t> Tokenizer::encode_with_special_tokens(std::string_view text) const {
  std::vector<int32_t> out = rules_.prefix;
  std::vector<int32_t> body = encode(text);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), rules_.suffix.begin(), rules_.suffix.end());
  return out;
}

void Tokenizer::encode_ordinary(std::string_view text, TextStart start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalised;
  if (rules_.nfc) {
    normalised = nfc(text);
    text = normalised;
  }
  std::vector<std::string_view> pieces;
  if (!rules_.sentencepiece()) {
    rules_.pretokenizer.split(text, pieces);
    for (std::string_view piece : pieces) encode_piece(piece, out);
    return;
  }
  using SpacePrefix = EncodingRules::SpacePrefix;
  const bool spaced_already = text.starts_with(' ') || text.starts_with(kMetaspace);
  const bool begins = start != TextStart::continuing;
  const bool prefixed = (rules_.space_prefix == SpacePrefix::prepend && begins) ||
                        (rules_.space_prefix == SpacePrefix::metaspace_always && begins && !spaced_already) ||
                        (rules_.space_prefix == SpacePrefix::metaspace_first && start == TextStart::input &&
                         !spaced_already);
  std::string spaced = prefixed ? " " : "";  // the text with its "▁" as spaces
  append_with_spaces(spaced, text);
  const std::string_view whole = spaced;
  size_t piece_start = 0;
  const bool every_space = rules_.split_at_every_space;
  for (size_t i = 1; i < whole.size() && (split_at_spaces_ || every_space); ++i)
    if (whole[i] == ' ' && (whole[i - 1] != ' ' || every_space)) {
      encode_piece(whole.substr(piece_start, i - piece_start), out);
      piece_start = i;
    }
  encode_piece(whole.substr(piece_start), out);
}

std::vector<int32_t> Tokenizer::sentencepiece_symbols(std::string_view piece) const {
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  for (size_t at = 0; at < piece.size();) {
    const int length = std::max(utf8_char_at(piece, at).length, 1);
    const auto token = char_tokens_.find(piece.substr(at, size_t(length)));
    if (token != char_tokens_.end()) {
      ids.push_back(token->second);
    } else {
      for (int k = 0; k < length; ++k) ids.push_back(byte_token_[static_cast<unsigned char>(piece[at + size_t(k)])]);
    }
    at += size_t(length);
  }
  return ids;
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1 && !rules_.sentencepiece()) {
    out.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (rules_.ignore_merges) {
    auto whole = whole_tokens_.find(piece);
    if (whole != whole_tokens_.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  const bool cached = piece.size() <= kMaxCachedPieceBytes;
  if (cached) {
    std::shared_lock lock(cache_->mutex);
    auto it = cache_->pieces.find(piece);
    if (it != cache_->pieces.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (rules_.sentencepiece()) {
    ids = sentencepiece_symbols(piece);
  } else {
    ids.resize(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) ids[i] = byte_token_[static_cast<unsigned char>(piece[i])];
  }
  merger_.merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (!cached) return;
  std::unique_lock lock(cache_->mutex);
  if (cache_->pieces.size() >= kMaxCachedPieces) cache_->pieces.clear();
  cache_->pieces.emplace(std::string(piece), std::move(ids));
}

}  // namespace tessera
