// Tokenizer::load picks the format from what the path holds; TextVocab turns a {token: id} object
// into raw token bytes by id, checking ids are unique and dense.
#include "data/tokenizer_files.h"

#include <algorithm>

#include "core/error.h"
#include "core/user_text.h"
#include "data/byte_level.h"
#include "data/json_excerpt.h"
#include "data/metaspace.h"
#include "data/whole_file.h"

namespace tessera {
namespace vocab_files {

nlohmann::json parse_json_file(const std::filesystem::path& file) {
  std::string text = read_whole_file(file, "tokenizer file", kMaxTokenizerFileBytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL(quoted_text(file.string()), ": not valid JSON (", json_error_text(e), ")");
  }
}

std::string byte_token_text(int byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">";
}

namespace {

// The bytes a SentencePiece token stands for: its "▁" as spaces, a byte token's byte; none for text
// holding a plain space (which its normaliser never leaves).
std::optional<std::string> sentencepiece_bytes(std::string_view text) {
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  if (text.size() == 6 && text.starts_with("<0x") && text[5] == '>' && hex(text[3]) >= 0 && hex(text[4]) >= 0)
    return std::string(1, char(hex(text[3]) * 16 + hex(text[4])));
  if (text.find(' ') != std::string_view::npos) return std::nullopt;
  std::string bytes;
  append_with_spaces(bytes, text);
  return bytes;
}

}  // namespace

TextVocab::TextVocab(const nlohmann::json& vocab, const std::map<int32_t, std::string>& added, std::string file,
                     TokenSpelling spelling)
    : file_(std::move(file)) {
  const bool sentencepiece = spelling == TokenSpelling::sentencepiece;
  TS_CHECK(vocab.is_object(), file_, ": the vocabulary must be a JSON object {token: id}");
  // Dense ids: none can reach the number of distinct tokens.
  const size_t limit = vocab.size() + added.size();
  std::vector<bool> known(limit, false);
  tokens_.resize(limit);
  size_t size = 0;
  auto place = [&](int64_t id, std::string bytes) {
    tokens_[size_t(id)] = std::move(bytes);
    known[size_t(id)] = true;
    size = std::max(size, size_t(id) + 1);
  };
  for (const auto& [text, value] : vocab.items()) {
    TS_CHECK(value.is_number_integer(), file_, ": token '", text, "' has id ", json_excerpt(value), ", not an integer");
    auto id = value.get<int64_t>();
    TS_CHECK(id >= 0 && size_t(id) < limit, file_, ": token '", text, "' has id ", id,
             "; ids must run from 0 to the vocabulary size - 1");
    ids_.emplace(text, int32_t(id));
    if (added.count(int32_t(id)) > 0) continue;  // placed below, from its plain text
    TS_CHECK(!known[size_t(id)], file_, ": id ", id, " is given to two tokens, one is '", text, "'");
    std::optional<std::string> bytes = sentencepiece ? sentencepiece_bytes(text) : byte_level_decode(text);
    TS_CHECK(bytes.has_value(), file_, ": token ", quoted_text(text, 40), " (id ", id, ") ",
             sentencepiece ? std::string("holds a plain space, which SentencePiece's normaliser turns into \"")
                                 .append(kMetaspace)
                                 .append("\"")
                           : std::string("is not byte-level BPE text (a SentencePiece vocabulary has \"byte_fallback\": "
                                         "true)"));
    place(id, std::move(*bytes));
  }
  for (const auto& [id, text] : added) {
    TS_CHECK(size_t(id) < limit, file_, ": added token '", text, "' has id ", id,
             "; ids must run from 0 to the vocabulary size - 1");
    place(id, text);
    ids_.emplace(sentencepiece ? text : byte_level_encode(text), id);
  }
  tokens_.resize(size);
  for (size_t id = 0; id < size; ++id)
    TS_CHECK(known[id], file_, ": no token has id ", id, "; ids must run from 0 to ", size - 1, " without gaps");
}

std::vector<int32_t> TextVocab::byte_token_ids() const {
  std::vector<int32_t> ids(256);
  for (int b = 0; b < 256; ++b) {
    const auto it = ids_.find(byte_token_text(b));
    TS_CHECK(it != ids_.end(), file_, ": byte fallback needs the byte tokens <0x00> to <0xFF>; ", byte_token_text(b),
             " is missing");
    ids[size_t(b)] = it->second;
  }
  return ids;
}

BpeMerge TextVocab::merge(std::string_view left, std::string_view right, const std::string& where) const {
  auto lookup = [&](std::string_view text, const char* role) {
    auto it = ids_.find(std::string(text));
    TS_CHECK(it != ids_.end(), where, ": ", role, " token '", text, "' is not in the vocabulary of ", file_);
    return it->second;
  };
  std::string joined = std::string(left) + std::string(right);
  return BpeMerge{lookup(left, "left"), lookup(right, "right"), lookup(joined, "merged")};
}

BpeMerge TextVocab::merge_line(std::string_view line, const std::string& where) const {
  size_t space = line.find(' ');
  TS_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
               line.find(' ', space + 1) == std::string_view::npos,
           where, ": expected two tokens separated by one space, got '", line, "'");
  return merge(line.substr(0, space), line.substr(space + 1), where);
}

}  // namespace vocab_files

namespace {

Tokenizer load_by_layout(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  TS_CHECK(fs::exists(status), "tokenizer path ", path.string(),
           " does not exist; give a tokenizer.json or *.tiktoken file, or a folder with tokenizer.json or "
           "encoder.json + vocab.bpe");
  fs::path folder = fs::is_directory(status) ? path : path.parent_path();
  std::string name = path.filename().string();
  if (!fs::is_directory(status) && path.extension() == ".tiktoken") return vocab_files::load_tiktoken(path);
  if (!fs::is_directory(status) && name != "encoder.json" && name != "vocab.bpe")
    return vocab_files::load_hf_json(path);
  if (fs::is_directory(status) && fs::exists(folder / "tokenizer.json"))
    return vocab_files::load_hf_json(folder / "tokenizer.json");
  bool encoder = fs::exists(folder / "encoder.json"), merges = fs::exists(folder / "vocab.bpe");
  TS_CHECK(encoder || merges, "tokenizer folder ", folder.string(),
           " holds neither tokenizer.json nor encoder.json + vocab.bpe");
  TS_CHECK(encoder, (folder / "encoder.json").string(), " is missing; vocab.bpe needs its encoder.json beside it");
  TS_CHECK(merges, (folder / "vocab.bpe").string(), " is missing; encoder.json needs its vocab.bpe beside it");
  return vocab_files::load_openai_files(folder / "encoder.json", folder / "vocab.bpe");
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  try {
    return load_by_layout(path);
  } catch (const nlohmann::json::exception& e) {  // a JSON value of a type no check above expected
    TS_FAIL("tokenizer ", quoted_text(path.string()), ": unexpected JSON content (", library_detail(e.what()), ")");
  }
}

}  // namespace tessera
