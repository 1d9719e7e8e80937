// Documents of a corpus file, read one at a time without holding the file: plain text (the whole
// file one document, or the pieces between lines equal to a delimiter, as fortune files hold them)
// or JSON lines (the string under a key of each line's object, as Hugging Face datasets and web
// dumps such as FineWeb ship them). Either may be gzip-compressed (*.gz): zlib reads both kinds.
// Supervised fine-tuning data is JSON lines with a prompt and a completion under two keys, or a
// conversation (a list of messages) that a chat template renders (data/chat_template.h): a
// document is then pieces that train or do not.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"

namespace tessera {

enum class DocumentFormat { text, jsonl };

struct DocumentOptions {
  std::string format = "auto";    // auto (by the name: *.jsonl, *.ndjson, either .gz: JSON lines), text, jsonl
  std::string delimiter;          // text: a line that separates documents; empty: the whole file is one
  std::string jsonl_key = "text";  // JSON lines: the key whose string is the document
  std::string jsonl_prompt_key;    // JSON lines: the key of a prompt before the document; empty: none
  std::string chat_template;       // JSON lines: the key holds messages, rendered so; empty: none
};

// The format `options.format` gives `file`; an unknown value throws naming --format.
DocumentFormat document_format(const DocumentOptions& options, const std::filesystem::path& file);

// A document as read, before a JSON line is parsed (which callers may do on other threads).
struct DocumentRecord {
  std::string bytes;  // a JSON line, or the document itself
  int64_t line = 0;   // where it starts in the file (JSON lines: its line number)
};

// A document: its pieces in order. One trained piece but for prompts and conversations.
struct Document {
  std::vector<DocumentPiece> pieces;
  std::vector<std::string> roles;  // a conversation's, message by message (a chat template's records)
  // Whether any trained piece has text: a document without is skipped.
  bool has_target() const;
};

class DocumentReader {
 public:
  // Opens `file` (a regular file; errors name it). A prompt key or a chat template needs JSON lines,
  // and they exclude each other.
  DocumentReader(const std::filesystem::path& file, const DocumentOptions& options);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next non-empty document into `document`; false after the last. A JSON line that is not an
  // object with a string under the key throws, naming the file, the line and the fix (bytes that
  // are not UTF-8 by their offset); a lone UTF-16 surrogate escape (\ud83d) reads as U+FFFD.
  bool next(std::string& document);
  // next() in two halves: the next record (a non-blank JSON line, or a text document), and its
  // document (empty for a JSON line whose string is), which is safe to call from several threads.
  bool next_record(DocumentRecord& record);
  void document_of(DocumentRecord& record, Document& document) const;
  // Bytes of the file as stored (compressed, for *.gz) read so far, and its size.
  uint64_t bytes_read() const;
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  struct Stream;
  // Reads the next block of the file into the stream's buffer; false at the end of the file.
  bool fill();
  // The next line without its '\n' into `line`; false at the end of the file.
  bool read_line(std::string& line);
  // The messages under the key of a JSON line's object; `where` names the line in errors.
  std::vector<ChatMessage> messages_under(const nlohmann::json& record, const std::string& where) const;

  std::filesystem::path path_;
  DocumentOptions options_;
  DocumentFormat format_;
  std::optional<ChatTemplate> chat_template_;
  std::unique_ptr<Stream> stream_;
  uint64_t file_bytes_ = 0;
  int64_t line_number_ = 0;
  bool done_ = false;
};

}  // namespace tessera
