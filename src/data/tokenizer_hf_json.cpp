// Hugging Face tokenizer.json, read and written. Read: a BPE model with a byte-level pre-tokenizer
// and no normalizer, i.e. the GPT-2 family; options that would change the encoding (prefix space,
// dropout, byte fallback, subword affixes, stripping around added tokens) are refused by name
// rather than ignored. Written: the same layout as GPT-2's own tokenizer.json.
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/byte_level.h"
#include "data/json_excerpt.h"
#include "data/tokenizer_files.h"

namespace tessera {
namespace vocab_files {
namespace {

using Json = nlohmann::json;

// The value of an optional boolean option; `where` names the object in errors.
bool option_flag(const Json& object, const char* key, bool fallback, const std::string& where) {
  if (!object.contains(key) || object[key].is_null()) return fallback;
  TS_CHECK(object[key].is_boolean(), where, ": \"", key, "\" must be true or false");
  return object[key].get<bool>();
}

// True when the option is absent, null, or the empty string.
bool option_empty(const Json& object, const char* key) {
  return !object.contains(key) || object[key].is_null() || object[key] == "";
}

// The "type" of a tokenizer component, or the start of its JSON when it has none (for messages).
std::string type_of(const Json& object) {
  if (object.is_object() && object.contains("type") && object["type"].is_string()) return object["type"];
  return json_excerpt(object);
}

void check_supported(const Json& root, const std::string& name) {
  const Json& model = root["model"];
  std::string type = model.contains("type") ? type_of(model) : "BPE";
  TS_CHECK(type == "BPE", name, ": model type ", type, " is not supported; Tessera reads byte-level BPE tokenizers");
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    TS_CHECK(option_empty(model, key), name, ": model option \"", key, "\" is not supported");
  for (const char* key : {"byte_fallback", "ignore_merges"})
    TS_CHECK(!option_flag(model, key, false, name + " model"), name, ": model option \"", key,
             "\": true is not supported");
  TS_CHECK(!root.contains("normalizer") || root["normalizer"].is_null(), name, ": normalizer ",
           type_of(root["normalizer"]), " is not supported; Tessera applies no normalisation");
  const Json pre = root.value("pre_tokenizer", Json());
  TS_CHECK(type_of(pre) == "ByteLevel", name, ": pre_tokenizer ", type_of(pre),
           " is not supported; Tessera implements GPT-2's ByteLevel pre-tokenizer");
  TS_CHECK(!option_flag(pre, "add_prefix_space", false, name + " pre_tokenizer") &&
               option_flag(pre, "use_regex", true, name + " pre_tokenizer"),
           name, ": the ByteLevel pre_tokenizer must have add_prefix_space false and use_regex true");
}

// added_tokens: every entry becomes a special token, matched whole in the text.
std::vector<SpecialToken> read_added_tokens(const Json& root, const std::string& name) {
  std::vector<SpecialToken> specials;
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return specials;
  const Json& added = root["added_tokens"];
  TS_CHECK(added.is_array(), name, ": \"added_tokens\" must be an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const Json& entry = added[i];
    std::string where = name + " added_tokens[" + std::to_string(i) + "]";
    TS_CHECK(entry.is_object() && entry.contains("id") && entry["id"].is_number_integer() &&
                 entry.contains("content") && entry["content"].is_string(),
             where, ": expected an object with an integer \"id\" and a string \"content\"");
    for (const char* key : {"lstrip", "rstrip", "single_word"})
      TS_CHECK(!option_flag(entry, key, false, where), where, ": option \"", key, "\": true is not supported");
    auto id = entry["id"].get<int64_t>();
    TS_CHECK(id >= 0 && id < INT32_MAX, where, ": id ", id, " is out of range");
    specials.push_back({entry["content"].get<std::string>(), int32_t(id)});
  }
  return specials;
}

// One entry of model.merges: "left right" (the classic form) or ["left", "right"].
BpeMerge read_merge(const TextVocab& vocab, const Json& entry, const std::string& where) {
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string())
    return vocab.merge(entry[0].get<std::string>(), entry[1].get<std::string>(), where);
  TS_CHECK(entry.is_string(), where, ": a merge must be \"left right\" or [\"left\", \"right\"]");
  return vocab.merge_line(entry.get_ref<const std::string&>(), where);
}

}  // namespace

Tokenizer load_hf_json(const std::filesystem::path& file) {
  const std::string name = file.string();
  Json root = parse_json_file(file);
  TS_CHECK(root.is_object() && root.contains("model") && root["model"].is_object(), name,
           ": no \"model\" object; expected a Hugging Face tokenizer.json");
  check_supported(root, name);
  std::vector<SpecialToken> specials = read_added_tokens(root, name);
  std::map<int32_t, std::string> added;
  for (const SpecialToken& s : specials) added[s.id] = s.text;
  const Json& model = root["model"];
  TS_CHECK(model.contains("vocab") && model.contains("merges") && model["merges"].is_array(), name,
           ": the BPE model needs \"vocab\" and a \"merges\" array");
  TextVocab vocab(model["vocab"], added, name);
  std::vector<BpeMerge> merges;
  merges.reserve(model["merges"].size());
  for (size_t i = 0; i < model["merges"].size(); ++i)
    merges.push_back(read_merge(vocab, model["merges"][i], name + " model.merges[" + std::to_string(i) + "]"));
  return Tokenizer(vocab.take_tokens(), std::move(merges), std::move(specials), name);
}

}  // namespace vocab_files

void Tokenizer::save_json(const std::filesystem::path& file) const {
  using Json = nlohmann::json;  // keys come out sorted; readers do not depend on their order
  auto byte_level = [](const Json& extra) {
    Json j = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    j.update(extra);
    return j;
  };
  Json vocab = Json::object();
  for (size_t id = 0; id < tokens_.size(); ++id) vocab[byte_level_encode(tokens_[id])] = id;
  TS_CHECK(vocab.size() == tokens_.size(), "cannot save ", file.string(), ": two tokens of ", source_,
           " have the same bytes");
  Json merges = Json::array();
  for (const BpeMerge& m : merges_)
    merges.push_back(byte_level_encode(tokens_[size_t(m.left)]) + " " + byte_level_encode(tokens_[size_t(m.right)]));
  Json added = Json::array();
  for (const SpecialToken& s : specials_)
    added.push_back({{"id", s.id},
                     {"content", s.text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  Json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", std::move(added)},
               {"normalizer", nullptr},
               {"pre_tokenizer", byte_level(Json::object())},
               {"post_processor", byte_level({{"add_prefix_space", true}, {"trim_offsets", false}})},
               {"decoder", byte_level({{"add_prefix_space", true}})},
               {"model", std::move(model)}};
  std::string text;
  try {
    text = root.dump(2);
  } catch (const Json::type_error& e) {
    TS_FAIL("cannot save ", file.string(), ": a special token's text is not valid UTF-8 (", e.what(), ")");
  }
  write_file_atomic(file, text + "\n");
}

}  // namespace tessera
