// CPU kernel of the logits' soft cap (contract in ops/logit_softcap.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// x (n) = softcap * tanh(x / softcap), in place.
void logit_softcap(float* x, int64_t n, float softcap);

// The capped value's derivative, from the capped value y: 1 - (y / softcap)^2 = 1 - tanh^2.
inline float softcap_derivative(float y, float inv_softcap) {
  const float t = y * inv_softcap;
  return 1.0f - t * t;
}

}  // namespace tessera::cpu
