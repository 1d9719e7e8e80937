// DocumentReader: zlib's gz stream (which passes plain files through), split into lines by hand
// so that long JSON lines and NUL bytes survive, and the documents cut from them.
#include "data/document_reader.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"
#include "data/json_line.h"
#include "data/whole_file.h"

namespace tessera {
namespace {

bool ends_with_any(const std::string& name, std::initializer_list<std::string_view> suffixes) {
  return std::any_of(suffixes.begin(), suffixes.end(), [&](std::string_view s) { return name.ends_with(s); });
}

}  // namespace

struct DocumentReader::Stream {
  gzFile file = nullptr;
  std::string buffer;  // bytes read but not yet handed out, from `at`
  size_t at = 0;
  bool end = false;
  ~Stream() {
    if (file) gzclose(file);
  }
};

DocumentFormat document_format(const DocumentOptions& options, const std::filesystem::path& file) {
  if (options.format == "text") return DocumentFormat::text;
  if (options.format == "jsonl") return DocumentFormat::jsonl;
  TS_CHECK(options.format == "auto", "--format: unknown value ", quoted_text(options.format),
           "; use auto (by the file name), text or jsonl");
  const std::string name = file.filename().string();
  return ends_with_any(name, {".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"}) ? DocumentFormat::jsonl
                                                                                : DocumentFormat::text;
}

DocumentReader::DocumentReader(const std::filesystem::path& file, const DocumentOptions& options)
    : path_(file), options_(options), format_(document_format(options, file)), stream_(std::make_unique<Stream>()) {
  const RegularFile regular(file, "text file");
  file_bytes_ = regular.size();
  const int fd = dup(regular.fd());
  TS_CHECK(fd >= 0, "text file ", quoted_text(file.string()), ": cannot open it");
  stream_->file = gzdopen(fd, "rb");
  if (!stream_->file) close(fd);
  TS_CHECK(stream_->file != nullptr, "text file ", quoted_text(file.string()), ": cannot open it");
  gzbuffer(stream_->file, 1 << 20);
  for (const auto& [flag, value] : {std::pair{"--jsonl-prompt-key", &options.jsonl_prompt_key},
                                     std::pair{"--chat-template", &options.chat_template}})
    TS_CHECK(value->empty() || format_ == DocumentFormat::jsonl, flag, " needs JSON lines, but ",
             quoted_text(file.string()), " is read as text; give *.jsonl files or --format jsonl");
  TS_CHECK(options.jsonl_prompt_key.empty() || options.chat_template.empty(), "--jsonl-prompt-key and ",
           "--chat-template exclude each other: a record is a prompt and a completion, or a conversation");
  TS_CHECK(options.jsonl_prompt_key != options.jsonl_key, "--jsonl-prompt-key and --jsonl-key both name ",
           quoted_text(options.jsonl_key), "; the prompt and the completion need keys of their own");
  if (!options.chat_template.empty()) chat_template_ = ChatTemplate::named(options.chat_template);
}

bool Document::has_target() const {
  for (const DocumentPiece& piece : pieces)
    if (piece.trained && !piece.text.empty()) return true;
  return false;
}

DocumentReader::~DocumentReader() = default;

uint64_t DocumentReader::bytes_read() const {
  const z_off_t offset = gzoffset(stream_->file);
  return offset < 0 ? 0 : std::min<uint64_t>(uint64_t(offset), file_bytes_);
}

bool DocumentReader::fill() {
  Stream& s = *stream_;
  if (s.end) return false;
  s.buffer.erase(0, s.at);
  s.at = 0;
  const size_t kept = s.buffer.size();
  s.buffer.resize(kept + (1 << 20));
  const int got = gzread(s.file, s.buffer.data() + kept, 1u << 20);
  int code = Z_OK;
  const char* message = gzerror(s.file, &code);
  TS_CHECK(got >= 0 && code != Z_BUF_ERROR, "text file ", quoted_text(path_.string()), ": ",
           message && *message ? message : "read error", " (a damaged or truncated .gz?)");
  s.buffer.resize(kept + size_t(got));
  s.end = got == 0;
  return got > 0;
}

bool DocumentReader::read_line(std::string& line) {
  Stream& s = *stream_;
  line.clear();
  while (true) {
    const size_t newline = s.buffer.find('\n', s.at);
    if (newline != std::string::npos) {
      line.append(s.buffer, s.at, newline - s.at);
      s.at = newline + 1;
      ++line_number_;
      return true;
    }
    line.append(s.buffer, s.at, std::string::npos);
    s.at = s.buffer.size();
    TS_CHECK(line.size() <= kMaxTextFileBytes, "text file ", quoted_text(path_.string()), ": line ",
             line_number_ + 1, " is longer than ", kMaxTextFileBytes >> 30, " GiB; split the file");
    if (!fill()) break;
  }
  if (line.empty()) return false;
  ++line_number_;
  return true;
}

bool DocumentReader::next(std::string& document) {
  DocumentRecord record;
  Document parts;
  while (next_record(record)) {
    document_of(record, parts);
    document.clear();
    for (const DocumentPiece& piece : parts.pieces) document += piece.text;
    if (!document.empty()) return true;
  }
  return false;
}

void DocumentReader::document_of(DocumentRecord& record, Document& document) const {
  document.pieces.clear();
  document.roles.clear();
  if (format_ == DocumentFormat::text) {
    document.pieces.push_back({std::move(record.bytes), true});
    return;
  }
  const nlohmann::json j = parse_json_line(record.bytes, path_, record.line);
  const auto where = [&] { return json_line_place(path_, record.line); };
  const auto string_under = [&](const std::string& key, const char* flag, const char* what) {
    const auto value = j.find(key);
    TS_CHECK(value != j.end() && value->is_string(), where(), ": no string under ", quoted_text(key), "; name the ",
             what, " key with ", flag);
    return value->get<std::string>();
  };
  if (chat_template_) {
    const std::vector<ChatMessage> messages = messages_under(j, where());
    try {
      document.pieces = chat_template_->render(messages);
    } catch (const Error& e) {
      TS_FAIL(where(), ": ", e.what());
    }
    for (const ChatMessage& m : messages) document.roles.push_back(m.role);
    return;
  }
  if (!options_.jsonl_prompt_key.empty())
    document.pieces.push_back({string_under(options_.jsonl_prompt_key, "--jsonl-prompt-key", "prompts'"), false});
  document.pieces.push_back({string_under(options_.jsonl_key, "--jsonl-key", "documents'"), true});
}

std::vector<ChatMessage> DocumentReader::messages_under(const nlohmann::json& record, const std::string& where) const {
  const auto list = record.find(options_.jsonl_key);
  TS_CHECK(list != record.end() && list->is_array(), where, ": no list of messages under ",
           quoted_text(options_.jsonl_key), "; name the conversations' key with --jsonl-key");
  std::vector<ChatMessage> messages;
  for (const nlohmann::json& m : *list) {
    const auto role = m.is_object() ? m.find("role") : m.end();
    const auto content = m.is_object() ? m.find("content") : m.end();
    TS_CHECK(m.is_object() && role != m.end() && role->is_string() && content != m.end() && content->is_string(),
             where, ": message ", messages.size() + 1, " is not an object with string \"role\" and \"content\"; ",
             "--chat-template renders messages such as {\"role\": \"user\", \"content\": \"Hi\"}");
    // An assistant's reasoning (Qwen3's think block), where the record keeps it apart from the content.
    const auto reasoning = m.find("reasoning_content");
    messages.push_back({role->get<std::string>(), content->get<std::string>(),
                        reasoning != m.end() && reasoning->is_string() ? reasoning->get<std::string>() : ""});
  }
  return messages;
}

bool DocumentReader::next_record(DocumentRecord& record) {
  std::string& document = record.bytes;
  document.clear();
  std::string line;
  if (format_ == DocumentFormat::jsonl) {
    while (read_line(line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      record.line = line_number_;
      document = std::move(line);
      return true;
    }
    return false;
  }
  record.line = line_number_ + 1;
  if (options_.delimiter.empty()) {  // the whole file, byte for byte
    if (done_) return false;
    done_ = true;
    do {
      document.append(stream_->buffer, stream_->at, std::string::npos);
      stream_->at = stream_->buffer.size();
      TS_CHECK(document.size() <= kMaxTextFileBytes, "text file ", quoted_text(path_.string()), " is larger than ",
               kMaxTextFileBytes >> 30, " GiB as one document; give --delimiter or split it");
    } while (fill());
    return !document.empty();
  }
  while (read_line(line)) {
    const std::string_view bare = std::string_view(line).substr(0, line.ends_with('\r') ? line.size() - 1 : line.size());
    if (bare == options_.delimiter) {
      if (!document.empty()) return true;
      record.line = line_number_ + 1;
      continue;
    }
    document += line;
    document += '\n';
  }
  return !document.empty();
}

}  // namespace tessera
