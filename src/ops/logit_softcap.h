// Gemma 2's soft cap on the logits (final_logit_softcapping), in place: x -> softcap * tanh(x / softcap),
// every entry within (-softcap, softcap). The cross-entropy ops take the capped logits and the same
// softcap, and carry their gradient back to the raw logits (ops/cross_entropy.h). f32 on the CPU; the
// GPU refuses it (no kernel yet).
#pragma once

#include "core/tensor.h"

namespace tessera {

// softcap > 0.
void logit_softcap(Tensor& logits, float softcap);

}  // namespace tessera
