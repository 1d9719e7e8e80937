// CPU kernels of SwiGLU on a packed [gate | up] input (contract in ops/swiglu.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (N,F) = silu(h[:, :F]) * h[:, F:], from h (N,2F).
void swiglu_forward(float* out, const float* h, int64_t N, int64_t F);
// dh (N,2F) written from dout (N,F) and h (N,2F).
void swiglu_backward(float* dh, const float* dout, const float* h, int64_t N, int64_t F);

}  // namespace tessera::cpu
