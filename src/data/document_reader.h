// Documents of a corpus file, read one at a time without holding the file: plain text (the whole
// file one document, or the pieces between lines equal to a delimiter, as fortune files hold them)
// or JSON lines (the string under a key of each line's object, as Hugging Face datasets and web
// dumps such as FineWeb ship them). Either may be gzip-compressed (*.gz): zlib reads both kinds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace tessera {

enum class DocumentFormat { text, jsonl };

struct DocumentOptions {
  std::string format = "auto";    // auto (by the name: *.jsonl, *.ndjson, either .gz: JSON lines), text, jsonl
  std::string delimiter;          // text: a line that separates documents; empty: the whole file is one
  std::string jsonl_key = "text";  // JSON lines: the key whose string is the document
  std::string jsonl_prompt_key;    // JSON lines: the key of a prompt before the document; empty: none
};

// The format `options.format` gives `file`; an unknown value throws naming --format.
DocumentFormat document_format(const DocumentOptions& options, const std::filesystem::path& file);

// A document as read, before a JSON line is parsed (which callers may do on other threads).
struct DocumentRecord {
  std::string bytes;  // a JSON line, or the document itself
  int64_t line = 0;   // where it starts in the file (JSON lines: its line number)
};

// A document and the prompt before it (empty unless DocumentOptions::jsonl_prompt_key is given).
struct Document {
  std::string prompt;
  std::string text;
};

class DocumentReader {
 public:
  // Opens `file` (a regular file; errors name it). A prompt key needs JSON lines.
  DocumentReader(const std::filesystem::path& file, const DocumentOptions& options);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next non-empty document into `document`; false after the last. A JSON line that is not an
  // object with a string under the key throws, naming the file, the line and the fix.
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

  std::filesystem::path path_;
  DocumentOptions options_;
  DocumentFormat format_;
  std::unique_ptr<Stream> stream_;
  uint64_t file_bytes_ = 0;
  int64_t line_number_ = 0;
  bool done_ = false;
};

}  // namespace tessera
