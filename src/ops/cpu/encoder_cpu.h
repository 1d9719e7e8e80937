// CPU kernels of the token + position embedding (contract in ops/encoder.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (B,T,C), tokens (B,T), wte rows [first, first + rows) of the table (a token outside them adds
// nothing), wpe (>=T,C) or null (no position table).
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                     int64_t C, int64_t first, int64_t rows);
// dwte (rows,C) +=, dwpe (>=T,C) += (or null), from dout (B,T,C).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                      int64_t C, int64_t first, int64_t rows);

}  // namespace tessera::cpu
