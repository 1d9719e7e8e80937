// CPU kernels of the residual connection (contract in ops/residual.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (n) = a (n) + b (n).
void residual_forward(float* out, const float* a, const float* b, int64_t n);
// acc (n) += x (n).
void add_inplace(float* acc, const float* x, int64_t n);

}  // namespace tessera::cpu
