// libFuzzer: an llm.c token shard (256-int header, then uint16 or uint32 tokens) and a loss mask
// (256-int header, then bits) on arbitrary bytes; every token and mask bit of a file accepted is read.
#include "core/error.h"
#include "data/loss_mask.h"
#include "data/token_shard.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::TokenShard shard(tessera::fuzz::write_input("train_000000.bin", data, size));
    for (int64_t i = 0; i < shard.num_tokens(); ++i) shard.token(i);
  } catch (const tessera::Error&) {
  }
  try {
    tessera::LossMask mask(tessera::fuzz::write_input("train_000000.mask", data, size));
    for (int64_t i = 0; i < mask.num_tokens(); ++i) mask.trained(i);
  } catch (const tessera::Error&) {
  }
  return 0;
}
