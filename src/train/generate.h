// Autoregressive sampling from a decoder: temperature, top-k and nucleus (top-p) over the real
// (unpadded) vocabulary. The prompt runs once into a key/value cache, then each new token alone; when the
// context is full the cache restarts from the last context() tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "nn/decoder.h"

namespace tessera {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  float temperature = 1.0f;  // 0 = greedy
  int64_t top_k = 40;        // 0 = the whole vocabulary
  float top_p = 1.0f;        // nucleus: the fewest most likely of those tokens whose probability
                             // reaches top_p (at least one); 1 = all of them
  int32_t stop_token = -1;   // stop after emitting this token (e.g. <|endoftext|>); -1 = never
  std::vector<int32_t> also_stop_at = {};  // and after any of these (a chat's end of text beside its end of turn)
  // Draw only ids below this: the tokenizer's size when the model's vocabulary is larger (ids the
  // tokenizer cannot decode); 0 = the model's whole vocabulary.
  int64_t vocab_limit = 0;

  // Throws naming the flag: a temperature that is negative or not finite, a negative top-k or
  // token count, a top-p outside (0, 1].
  void validate() const;
  // Whether generation ends after emitting `token`.
  bool stops_at(int32_t token) const;
};

// Returns only the new tokens; on_token (optional) sees each as it is produced.
std::vector<int32_t> generate(Decoder& model, const std::vector<int32_t>& prompt, const SamplingOptions& options,
                              Rng& rng, const std::function<void(int32_t)>& on_token = {});

// Picks a token from one row of logits (only the first vocab_size entries count).
int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingOptions& options, Rng& rng);

}  // namespace tessera
