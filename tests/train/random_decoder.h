// A small decoder of one family with random weights large enough that its predictions differ from
// token to token (the initialisation's near-uniform logits give one greedy token over and over, and
// choices that score alike), the router's larger so that tokens take different experts.
#pragma once

#include <string>

#include "core/rng.h"
#include "nn/decoder.h"
#include "nn/model_presets.h"

namespace tessera::testing {

// `preset` cut to 2 layers, a vocabulary of 50 and a context of `context`, weights drawn with `seed`.
inline Decoder random_decoder(const std::string& preset, int64_t context, uint64_t seed) {
  ModelConfig c = model_preset(preset);
  c.num_layers = 2;
  c.vocab_size = 50;
  c.max_seq_len = context;
  Decoder model(c);
  for (NamedTensor& p : model.named_params()) {
    const float scale = p.name.find("router") != std::string::npos ? 3.0f : 0.3f;
    for (int64_t i = 0; i < p.tensor.numel(); ++i) p.tensor.f32()[i] = scale * normal_at(seed, stream_id(p.name), uint64_t(i));
  }
  model.params_updated();
  return model;
}

}  // namespace tessera::testing
