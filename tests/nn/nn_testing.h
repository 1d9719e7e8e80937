// Shared by the model tests: a batch of random tokens and targets.
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "core/tensor.h"

namespace tessera::testing {

struct Batch {
  Tensor tokens, targets;  // (B,T) i32
};

// Tokens and targets uniform in [0, V), from `seed`.
inline Batch make_batch(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Batch b{Tensor::zeros({B, T}, DType::i32), Tensor::zeros({B, T}, DType::i32)};
  Rng rng(seed);
  for (int64_t i = 0; i < B * T; ++i) {
    b.tokens.data<int32_t>()[i] = int32_t(rng.below(uint64_t(V)));
    b.targets.data<int32_t>()[i] = int32_t(rng.below(uint64_t(V)));
  }
  return b;
}

}  // namespace tessera::testing
