// CPU kernel of the fused softmax + cross-entropy (contract in ops/cross_entropy.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// losses (N) from logits (N,Vp) over the first V columns and targets (N) in [0,V) or kIgnoredTarget
// (loss 0). With dloss != 0 logits is overwritten with dloss * (softmax - onehot), padding columns 0,
// an ignored target's row all 0; softcap > 0: the logits are capped and the gradient is the raw ones'.
void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                           float dloss, float softcap);

}  // namespace tessera::cpu
