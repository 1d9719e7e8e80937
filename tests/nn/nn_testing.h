// Shared by the model tests: a batch of random tokens and targets, and the directional-derivative
// check of a whole model's gradient.
#pragma once

#include <cstdint>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "nn/decoder.h"

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

// The gradient `grad` of `objective` at the model's parameters, checked along one random direction
// over all of them by central differences (step 1e-3, 1% relative). Leaves the parameters moved.
inline void expect_directional_derivative(Decoder& model, const std::vector<float>& grad,
                                          const std::function<double()>& objective) {
  float* p = model.params().f32();
  const int64_t n = model.params().numel();
  std::vector<float> saved(p, p + n), dir(static_cast<size_t>(n));
  double g_dot_d = 0;
  for (int64_t i = 0; i < n; ++i) {
    dir[size_t(i)] = normal_at(5, 5, uint64_t(i));
    g_dot_d += double(grad[size_t(i)]) * dir[size_t(i)];
  }
  auto along = [&](float t) {
    for (int64_t i = 0; i < n; ++i) p[i] = saved[size_t(i)] + t * dir[size_t(i)];
    return objective();
  };
  const float h = 1e-3f;
  const double fd = (along(h) - along(-h)) / (2.0 * h);
  EXPECT_NEAR(g_dot_d, fd, 0.01 * std::fabs(fd));
}

}  // namespace tessera::testing
