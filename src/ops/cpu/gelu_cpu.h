// CPU kernels of GELU, tanh approximation (contract in ops/gelu.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (n) = gelu(x (n)).
void gelu_forward(float* out, const float* x, int64_t n);
// dx (n) = dout (n) * gelu'(x (n)), written.
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n);

}  // namespace tessera::cpu
