// CPU kernels of SwiGLU and GeGLU on a packed [gate | up] input (contract in ops/swiglu.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (N,F) = act(h[:, :F]) * h[:, F:], from h (N,2F); act silu, or with `gelu` GELU's tanh form.
void swiglu_forward(float* out, const float* h, int64_t N, int64_t F, bool gelu);
// dh (N,2F) written from dout (N,F) and h (N,2F).
void swiglu_backward(float* dh, const float* dout, const float* h, int64_t N, int64_t F, bool gelu);

}  // namespace tessera::cpu
