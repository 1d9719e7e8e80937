// Models for the Hugging Face adapter tests: every parameter drawn (the padding rows of the embedding, the head
// and its bias kept 0, as an export holds them), a parameter by name, and a bit-for-bit comparison.
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/rng.h"
#include "nn/decoder.h"

namespace tessera::testing {

inline Decoder random_hf_model(const ModelConfig& config, uint64_t seed) {
  Decoder model(config);
  for (NamedTensor& p : model.named_params()) {
    const bool vocab = p.name == "embed_tokens.weight" || p.name.starts_with("lm_head.");
    const int64_t real = vocab ? p.tensor.numel() / config.padded_vocab_size() * config.vocab_size : p.tensor.numel();
    for (int64_t i = 0; i < p.tensor.numel(); ++i)
      p.tensor.f32()[i] = i < real ? normal_at(seed, stream_id(p.name), uint64_t(i)) : 0.0f;
  }
  return model;
}

inline const Tensor& param_named(const Decoder& model, const std::string& name) {
  for (const NamedTensor& p : model.named_params())
    if (p.name == name) return p.tensor;
  throw std::runtime_error("no parameter " + name);
}

inline void expect_same_bits(const Decoder& a, const Decoder& b) {
  ASSERT_EQ(a.params().numel(), b.params().numel());
  for (int64_t i = 0; i < a.params().numel(); ++i)
    ASSERT_EQ(a.params().f32()[i], b.params().f32()[i]) << "element " << i;
}

}  // namespace tessera::testing
