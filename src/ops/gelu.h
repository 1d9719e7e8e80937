// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//   forward: out = gelu(x);  backward: dx = dout * gelu'(x) (written). Any shape.
// All tensors share x's dtype: f32, or bf16 on the GPU (bf16 storage, fp32 arithmetic).
#pragma once

#include "core/tensor.h"

namespace tessera {

void gelu_forward(Tensor& out, const Tensor& x);
void gelu_backward(Tensor& dx, const Tensor& dout, const Tensor& x);

}  // namespace tessera
