// CPU fp8 fake-quantize (contract in ops/fp8_quantize.h).
#pragma once

#include <cstdint>

#include "core/fp8.h"

namespace tessera::cpu {

// out (n) = x (n) through `format` at `scale`, out == x allowed; *amax = the larger of *amax and
// max |x_i| by fp8_amax_key (NaN wins), unchanged when n == 0.
void fp8_quantize_dequantize(float* out, const float* x, int64_t n, Fp8Format format, float scale, float* amax);

}  // namespace tessera::cpu
