// CPU kernel of the logits' soft cap (contract in ops/logit_softcap.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// x (n) = softcap * tanh(x / softcap), in place (soft_cap, ops/cpu/kernel_util.h).
void logit_softcap(float* x, int64_t n, float softcap);

}  // namespace tessera::cpu
