// libFuzzer: a tiktoken rank file (read as cl100k_base.tiktoken) on arbitrary bytes; a tokenizer it
// accepts must encode and decode a short text.
#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::Tokenizer tokenizer =
        tessera::Tokenizer::load(tessera::fuzz::write_input("cl100k_base.tiktoken", data, size));
    tokenizer.decode(tokenizer.encode("Hello, world! 123 DON'T <|endoftext|>"));
  } catch (const tessera::Error&) {
  }
  return 0;
}
