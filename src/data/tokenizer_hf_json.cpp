// Hugging Face tokenizer.json, read and written. Read: a BPE model with a byte-level pre-tokenizer
// (GPT-2's regex, or a Split regex before it as in Llama 3), ignore_merges, a TemplateProcessing
// post-processor and no normalizer or NFC (Qwen2); or SentencePiece's BPE with byte fallback, its
// spaces made "▁" by the normalizer (Gemma's), after a "▁" prepended (Llama 2's), or by a Metaspace
// pre-tokenizer (transformers' non-legacy Llama tokenizers). Options that would change the encoding
// (prefix space, dropout, subword affixes, stripping around added tokens) are refused by name rather
// than ignored. Written: GPT-2's own layout, Llama 3's when the pattern or post-processor differ, or the
// SentencePiece layout read.
#include <algorithm>
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/byte_level.h"
#include "data/json_excerpt.h"
#include "data/metaspace.h"
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
  TS_CHECK(type == "BPE", name, ": model type ", type,
           " is not supported; Tessera reads BPE tokenizers (byte-level, or SentencePiece's with byte fallback)");
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    TS_CHECK(option_empty(model, key), name, ": model option \"", key, "\" is not supported");
  if (option_flag(model, "byte_fallback", false, name + " model")) return;  // read_metaspace_normalizer's checks
  TS_CHECK(!root.contains("normalizer") || root["normalizer"].is_null() || type_of(root["normalizer"]) == "NFC", name,
           ": normalizer ", type_of(root["normalizer"]),
           " is not supported; Tessera applies NFC or no normalisation (or, with byte fallback, SentencePiece's)");
}

// Where a byte-fallback (SentencePiece) tokenizer makes its spaces "▁": the normalizer Replace(" ", "▁"),
// alone (Gemma's, with its Split at the spaces that are then gone) or after Prepend("▁") in a Sequence
// (Llama 2's); or, without a normalizer, a Metaspace pre-tokenizer (transformers' non-legacy Llama and
// Mistral tokenizers), its prepend_scheme and split.
void read_sentencepiece_spaces(const Json& root, const std::string& name, EncodingRules& rules) {
  using SpacePrefix = EncodingRules::SpacePrefix;
  const std::string metaspace(kMetaspace);
  const Json normalizer = root.value("normalizer", Json());
  const Json pre = root.value("pre_tokenizer", Json());
  if (type_of(pre) == "Metaspace") {
    const std::string key = name + ": pre_tokenizer Metaspace";
    TS_CHECK(normalizer.is_null(), name, ": normalizer ", type_of(normalizer),
             " before a Metaspace pre-tokenizer is not supported; Tessera reads Metaspace without a normalizer");
    TS_CHECK(pre.value("replacement", Json(metaspace)) == metaspace, key, ": replacement ",
             json_excerpt(pre.value("replacement", Json())), " is not supported; Tessera reads \"", metaspace, "\"");
    const bool add_prefix_space = option_flag(pre, "add_prefix_space", true, key);  // before prepend_scheme
    const Json scheme = pre.value("prepend_scheme", Json(add_prefix_space ? "always" : "never"));
    TS_CHECK(scheme == "always" || scheme == "first" || scheme == "never", key, ": prepend_scheme ",
             json_excerpt(scheme), " is not one of \"always\", \"first\" or \"never\"");
    rules.space_prefix = scheme == "always"  ? SpacePrefix::metaspace_always
                         : scheme == "first" ? SpacePrefix::metaspace_first
                                             : SpacePrefix::none;
    rules.split_at_every_space = option_flag(pre, "split", true, key);
    return;
  }
  const auto is_replace = [&](const Json& step) {
    return type_of(step) == "Replace" && step.value("pattern", Json()) == Json{{"String", " "}} &&
           step.value("content", Json()) == metaspace;
  };
  const auto is_prepend = [&](const Json& step) {
    return type_of(step) == "Prepend" && step.value("prepend", Json()) == metaspace;
  };
  const Json steps = type_of(normalizer) == "Sequence" ? normalizer.value("normalizers", Json()) : Json();
  const bool prepends = steps.is_array() && steps.size() == 2 && is_prepend(steps[0]) && is_replace(steps[1]);
  TS_CHECK(prepends || is_replace(normalizer), name, ": normalizer ", json_excerpt(normalizer),
           " is not supported with byte fallback; Tessera reads SentencePiece's Replace(\" \", \"", metaspace,
           "\"), alone or after Prepend(\"", metaspace, "\"), or a Metaspace pre-tokenizer");
  // Gemma's splits at spaces, none of which the normalizer leaves: a Split that never matches.
  const bool idle_split = type_of(pre) == "Split" && pre.value("pattern", Json()) == Json{{"String", " "}} &&
                          pre.value("behavior", Json()) == "MergedWithPrevious" &&
                          !option_flag(pre, "invert", false, name);
  TS_CHECK(pre.is_null() || idle_split, name, ": pre_tokenizer ", type_of(pre), " after the normalizer ",
           type_of(normalizer), " is not supported with byte fallback; Tessera reads none there (or Gemma's Split ",
           "at spaces)");
  rules.space_prefix = prepends ? SpacePrefix::prepend : SpacePrefix::none;
}

// A ByteLevel pre-tokenizer at `key`: add_prefix_space must be off; returns use_regex.
bool byte_level_uses_regex(const Json& pre, const std::string& where) {
  TS_CHECK(!option_flag(pre, "add_prefix_space", false, where), where,
           ": ByteLevel with add_prefix_space true is not supported");
  return option_flag(pre, "use_regex", true, where);
}

// The regex of a Split pre-tokenizer at `key` that keeps matches as pieces of their own.
std::string split_regex(const Json& split, const std::string& key) {
  const Json pattern = split.value("pattern", Json());
  TS_CHECK(!(pattern.is_object() && pattern.contains("String")), key,
           ".pattern: {\"String\": ...} is not supported; Tessera splits by {\"Regex\": ...}");
  TS_CHECK(pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string(), key,
           ".pattern: expected {\"Regex\": \"...\"}, got ", json_excerpt(pattern));
  const Json behavior = split.value("behavior", Json("Isolated"));
  TS_CHECK(behavior == "Isolated", key, ".behavior ",
           behavior.is_string() ? quoted_text(behavior.get<std::string>(), 60) : json_excerpt(behavior),
           " is not supported; Tessera splits with behavior Isolated");
  TS_CHECK(!option_flag(split, "invert", false, key), key, ".invert: true is not supported");
  return pattern["Regex"].get<std::string>();
}

// The pre-tokenizer: ByteLevel with its GPT-2 regex, or a Sequence of one regex Split then ByteLevel
// without its regex (Llama 3, and tiktoken vocabularies converted to tokenizer.json).
Pretokenizer read_pre_tokenizer(const Json& root, const std::string& name) {
  const Json pre = root.value("pre_tokenizer", Json());
  const std::string key = name + ": pre_tokenizer";
  const std::string supported = "; Tessera reads ByteLevel, or a Sequence of a regex Split and ByteLevel";
  TS_CHECK(!pre.is_null(), name, ": no pre_tokenizer", supported);
  if (type_of(pre) == "ByteLevel") {
    TS_CHECK(byte_level_uses_regex(pre, key), key, ": ByteLevel with use_regex false needs a Split before it",
             supported);
    return Pretokenizer();
  }
  TS_CHECK(type_of(pre) == "Sequence", key, " type ", type_of(pre), " is not supported", supported);
  const Json steps = pre.value("pretokenizers", Json());
  TS_CHECK(steps.is_array(), key, ".pretokenizers must be an array");
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string type = type_of(steps[i]);
    TS_CHECK(type == "Split" || type == "ByteLevel", key, ".pretokenizers[", i, "] type ", type, " is not supported",
             supported);
  }
  TS_CHECK(steps.size() == 2 && type_of(steps[0]) == "Split" && type_of(steps[1]) == "ByteLevel", key,
           ".pretokenizers: a Sequence of ", steps.size(), " steps is not supported", supported);
  TS_CHECK(!byte_level_uses_regex(steps[1], key + ".pretokenizers[1]"), key,
           ".pretokenizers[1]: ByteLevel after a Split must have use_regex false");
  std::string where = key + ".pretokenizers[0]";
  std::string regex = split_regex(steps[0], where);
  return Pretokenizer(regex, where + ".pattern.Regex");
}

// The ids one TemplateProcessing template piece stands for: a named special token's ids (empty for
// the text itself, "Sequence").
std::vector<int32_t> template_ids(const Json& piece, const Json& specials, const std::string& where, bool& is_text) {
  is_text = piece.is_object() && piece.contains("Sequence");
  if (is_text) return {};
  TS_CHECK(piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
               piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string(),
           where, ": expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
  std::string token = piece["SpecialToken"]["id"];
  TS_CHECK(specials.is_object() && specials.contains(token) && specials[token].is_object() &&
               specials[token].contains("ids") && specials[token]["ids"].is_array(),
           where, ": special token '", token, "' has no \"ids\" in the template's special_tokens");
  std::vector<int32_t> ids;
  for (const Json& id : specials[token]["ids"]) {
    TS_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX, where,
             ": special token '", token, "' has id ", json_excerpt(id), ", not a token id");
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

// What the post_processor adds around one text: TemplateProcessing's "single" template (ByteLevel
// adds nothing to the ids; a Sequence applies its processors in turn).
void read_post_processor(const Json& processor, const std::string& key, EncodingRules& rules) {
  if (processor.is_null()) return;
  std::string type = type_of(processor);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const Json steps = processor.value("processors", Json());
    TS_CHECK(steps.is_array(), key, ".processors must be an array");
    for (size_t i = 0; i < steps.size(); ++i)
      read_post_processor(steps[i], key + ".processors[" + std::to_string(i) + "]", rules);
    return;
  }
  TS_CHECK(type == "TemplateProcessing", key, " type ", type,
           " is not supported; Tessera reads ByteLevel, TemplateProcessing or a Sequence of them");
  const Json single = processor.value("single", Json());
  TS_CHECK(single.is_array(), key, ".single must be an array of template pieces");
  const Json specials = processor.value("special_tokens", Json::object());
  bool seen_text = false;
  for (size_t i = 0; i < single.size(); ++i) {
    bool is_text = false;
    std::vector<int32_t> ids = template_ids(single[i], specials, key + ".single[" + std::to_string(i) + "]", is_text);
    TS_CHECK(!(is_text && seen_text), key, ".single holds the text twice");
    seen_text = seen_text || is_text;
    std::vector<int32_t>& side = seen_text ? rules.suffix : rules.prefix;
    side.insert(side.end(), ids.begin(), ids.end());
  }
  TS_CHECK(seen_text, key, ".single never places the text ({\"Sequence\": {\"id\": \"A\"}})");
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
  const bool sentencepiece = option_flag(model, "byte_fallback", false, name + " model");
  EncodingRules rules;
  if (sentencepiece) read_sentencepiece_spaces(root, name, rules);
  TextVocab vocab(model["vocab"], added, name,
                  sentencepiece ? TokenSpelling::sentencepiece : TokenSpelling::byte_level);
  std::vector<BpeMerge> merges;
  merges.reserve(model["merges"].size());
  for (size_t i = 0; i < model["merges"].size(); ++i)
    merges.push_back(read_merge(vocab, model["merges"][i], name + " model.merges[" + std::to_string(i) + "]"));
  if (sentencepiece) {
    rules.fallback_bytes = vocab.byte_token_ids();
  } else {
    rules.pretokenizer = read_pre_tokenizer(root, name);
    rules.nfc = root.contains("normalizer") && !root["normalizer"].is_null();  // NFC, the one check_supported lets by
  }
  rules.ignore_merges = option_flag(model, "ignore_merges", false, name + " model");
  read_post_processor(root.value("post_processor", Json()), name + ": post_processor", rules);
  return Tokenizer(vocab.take_tokens(), std::move(merges), std::move(specials), name, std::move(rules));
}

}  // namespace vocab_files

namespace {

using Json = nlohmann::json;

Json byte_level(const Json& extra) {
  Json j = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j.update(extra);
  return j;
}

// The TemplateProcessing that puts rules.prefix and rules.suffix around a text (null when both are
// empty).
Json template_processing(const EncodingRules& rules, const std::vector<std::string>& tokens) {
  if (rules.prefix.empty() && rules.suffix.empty()) return Json();
  Json single = Json::array(), specials = Json::object();
  auto add_special = [&](int32_t id) {
    const std::string& text = tokens[size_t(id)];
    single.push_back({{"SpecialToken", {{"id", text}, {"type_id", 0}}}});
    specials[text] = {{"id", text}, {"ids", {id}}, {"tokens", {text}}};
  };
  for (int32_t id : rules.prefix) add_special(id);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  for (int32_t id : rules.suffix) add_special(id);
  Json pair = single;  // the second text after the first, with the same tokens around it
  for (const Json& piece : single) {
    Json second = piece;
    if (second.contains("Sequence")) second["Sequence"]["id"] = "B";
    second.begin()->at("type_id") = 1;
    pair.push_back(second);
  }
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

// The normalizer, pre_tokenizer, post_processor and decoder that reproduce `rules`: GPT-2's ByteLevel
// layout when they are GPT-2's, Llama 3's Split + ByteLevel for another pattern, SentencePiece's
// Replace (after a Prepend: Llama 2's) or Metaspace for byte fallback, with a Strip decoder where a
// space is put before the text.
void write_rules(const EncodingRules& rules, const std::vector<std::string>& tokens, Json& root) {
  const Json processing = template_processing(rules, tokens);
  if (rules.sentencepiece()) {
    const std::string metaspace(kMetaspace);
    using SpacePrefix = EncodingRules::SpacePrefix;
    const Json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", metaspace}};
    const bool metaspace_first = rules.space_prefix == SpacePrefix::metaspace_first;
    if (metaspace_first || rules.space_prefix == SpacePrefix::metaspace_always) {
      root["normalizer"] = nullptr;
      root["pre_tokenizer"] = {{"type", "Metaspace"},
                               {"replacement", metaspace},
                               {"prepend_scheme", metaspace_first ? "first" : "always"},
                               {"split", rules.split_at_every_space}};
    } else {
      root["normalizer"] = rules.space_prefix == SpacePrefix::none
                               ? replace
                               : Json{{"type", "Sequence"},
                                      {"normalizers", {{{"type", "Prepend"}, {"prepend", metaspace}}, replace}}};
      root["pre_tokenizer"] = nullptr;
    }
    root["post_processor"] = processing;
    Json decoders = {{{"type", "Replace"}, {"pattern", {{"String", metaspace}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}};
    if (rules.space_prefix != SpacePrefix::none)
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    return;
  }
  root["normalizer"] = rules.nfc ? Json{{"type", "NFC"}} : Json();
  if (rules.pretokenizer.pattern() == kGpt2Pattern) {
    root["pre_tokenizer"] = byte_level(Json::object());
  } else {
    Json split = {{"type", "Split"},
                  {"pattern", {{"Regex", rules.pretokenizer.pattern()}}},
                  {"behavior", "Isolated"},
                  {"invert", false}};
    root["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers", Json::array({split, byte_level({{"use_regex", false}})})}};
  }
  Json post = byte_level({{"add_prefix_space", true}, {"trim_offsets", false}});
  if (!processing.is_null()) post = {{"type", "Sequence"}, {"processors", Json::array({post, processing})}};
  root["post_processor"] = post;
  root["decoder"] = byte_level({{"add_prefix_space", true}});
}

// How the file spells each token: byte-level text, or SentencePiece's (spaces as "▁", byte tokens <0xXX>).
std::vector<std::string> spelled_tokens(const std::vector<std::string>& tokens, const EncodingRules& rules) {
  std::vector<std::string> spelled(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id)
    spelled[id] = rules.sentencepiece() ? with_metaspaces(tokens[id]) : byte_level_encode(tokens[id]);
  for (int b = 0; b < 256 && rules.sentencepiece(); ++b)
    spelled[size_t(rules.fallback_bytes[size_t(b)])] = vocab_files::byte_token_text(b);
  return spelled;
}

}  // namespace

void Tokenizer::save_json(const std::filesystem::path& file) const {
  // keys come out sorted; readers do not depend on their order
  const std::vector<std::string> spelled = spelled_tokens(tokens_, rules_);
  Json vocab = Json::object();
  for (size_t id = 0; id < tokens_.size(); ++id) vocab[spelled[id]] = id;
  TS_CHECK(vocab.size() == tokens_.size(), "cannot save ", file.string(), ": two tokens of ", source_,
           " have the same bytes");
  TS_CHECK(rules_.merge_ranks.empty() || std::is_sorted(rules_.merge_ranks.begin(), rules_.merge_ranks.end()),
           "cannot save ", file.string(), ": the merges of ", source_, " are not in rank order");
  Json merges = Json::array();
  for (const BpeMerge& m : merges_) merges.push_back(spelled[size_t(m.left)] + " " + spelled[size_t(m.right)]);
  Json added = Json::array();
  for (const SpecialToken& s : specials_)
    added.push_back({{"id", s.id},
                     {"content", s.text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  const bool has_unk = rules_.sentencepiece() && special_token_id("<unk>").has_value();
  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", has_unk ? Json("<unk>") : Json()},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", rules_.sentencepiece()},
                {"byte_fallback", rules_.sentencepiece()},
                {"ignore_merges", rules_.ignore_merges},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  Json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", std::move(added)},
               {"model", std::move(model)}};
  write_rules(rules_, tokens_, root);
  std::string text;
  try {
    text = root.dump(2);
  } catch (const Json::type_error& e) {
    TS_FAIL("cannot save ", file.string(), ": a special token's text is not valid UTF-8 (", e.what(), ")");
  }
  write_file_atomic(file, text + "\n");
}

}  // namespace tessera
