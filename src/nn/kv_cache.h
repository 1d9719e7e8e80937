// The key/value cache of generation: every block's keys and values of the positions seen so far,
// so a new token attends over them instead of re-running the whole prefix. Made by
// Decoder::kv_cache(), filled by Decoder::forward_cached().
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/decoder_activations.h"

namespace tessera {

struct KvCache {
  int64_t batch = 0, capacity = 0;  // sequences, positions (the model's context)
  int64_t length = 0;               // positions cached so far
  std::vector<Tensor> keys, values; // per block: (batch, capacity, NKV*HS)
  DecoderActivations acts;          // the newest tokens' activations (blocks share one set) and logits
  void reset() { length = 0; }      // start a new sequence; the buffers stay
};

}  // namespace tessera
