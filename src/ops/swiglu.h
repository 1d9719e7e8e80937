// SwiGLU, the Llama MLP activation, on a packed input h (..., 2F) = [gate | up]: the gate is the
// first F columns of each row, up the last F. silu(g) = g * sigmoid(g).
//   forward:  out (..., F) = silu(gate) * up.
//   backward: dh (..., 2F) written: dgate = dout * up * silu'(gate), dup = dout * silu(gate);
//             silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g))).
// All tensors share h's dtype: f32, or bf16 or f16 on the GPU (16-bit storage, fp32 arithmetic; the
// CPU is the fp32 reference).
#pragma once

#include "core/tensor.h"

namespace tessera {

void swiglu_forward(Tensor& out, const Tensor& h);
void swiglu_backward(Tensor& dh, const Tensor& dout, const Tensor& h);

}  // namespace tessera
