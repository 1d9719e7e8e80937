// Gated linear units on a packed input h (..., 2F) = [gate | up]: the gate is the first F columns of
// each row, up the last F. SwiGLU (Llama's MLP activation) gates with silu(g) = g * sigmoid(g), GeGLU
// (Gemma's) with GELU's tanh approximation, gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
//   forward:  out (..., F) = act(gate) * up.
//   backward: dh (..., 2F) written: dgate = dout * up * act'(gate), dup = dout * act(gate);
//             silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g))).
// All tensors share h's dtype: f32, or bf16 or f16 on the GPU (16-bit storage, fp32 arithmetic; the
// CPU is the fp32 reference).
#pragma once

#include "core/tensor.h"

namespace tessera {

enum class GateActivation { silu, gelu_tanh };

void swiglu_forward(Tensor& out, const Tensor& h, GateActivation gate = GateActivation::silu);
void swiglu_backward(Tensor& dh, const Tensor& dout, const Tensor& h, GateActivation gate = GateActivation::silu);

}  // namespace tessera
