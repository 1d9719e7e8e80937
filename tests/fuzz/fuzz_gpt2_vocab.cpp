// libFuzzer: OpenAI's GPT-2 vocabulary pair, encoder.json and vocab.bpe, from one input split at its
// first zero byte; a tokenizer it accepts must encode and decode a short text.
#include <algorithm>

#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* split = std::find(data, data + size, uint8_t(0));
  const size_t first = size_t(split - data);
  tessera::fuzz::write_input("encoder.json", data, first);
  tessera::fuzz::write_input("vocab.bpe", split + (first < size), size - first - (first < size));
  try {
    tessera::Tokenizer tokenizer = tessera::Tokenizer::load(tessera::fuzz::work_dir());
    tokenizer.decode(tokenizer.encode("Hello, world! 123"));
  } catch (const tessera::Error&) {
  }
  return 0;
}
