// CPU kernels of GELU, its tanh approximation or (`exact`) its erf form (contract in ops/gelu.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (n) = gelu(x (n)).
void gelu_forward(float* out, const float* x, int64_t n, bool exact);
// dx (n) = dout (n) * gelu'(x (n)), written (dx may be dout).
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n, bool exact);

}  // namespace tessera::cpu
