// libFuzzer: a corpus file on arbitrary bytes, read as JSON lines (plain, or gzip when the bytes
// are a gzip stream; documents, prompts with completions, and conversations through a chat
// template) and as delimited text; every document it yields is a string, every failure a
// tessera::Error.
#include <string>

#include "core/error.h"
#include "data/document_reader.h"
#include "fuzz_input.h"

namespace {

void read_all(const std::filesystem::path& file, const tessera::DocumentOptions& options) {
  try {
    tessera::DocumentReader reader(file, options);
    for (std::string document; reader.next(document);) {
    }
  } catch (const tessera::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path jsonl_file = tessera::fuzz::write_input("corpus.jsonl.gz", data, size);
  tessera::DocumentOptions jsonl;
  read_all(jsonl_file, jsonl);
  tessera::DocumentOptions prompted;
  prompted.jsonl_prompt_key = "prompt";
  read_all(jsonl_file, prompted);
  tessera::DocumentOptions chat;
  chat.jsonl_key = "messages";
  chat.chat_template = "chatml";
  read_all(jsonl_file, chat);
  tessera::DocumentOptions text;
  text.delimiter = "%";
  read_all(tessera::fuzz::write_input("corpus.txt", data, size), text);
  return 0;
}
