// GELU in its tanh approximation, gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's), or
// its exact form, 0.5 x (1 + erf(x / sqrt 2)) (GPT-NeoX's; CPU only for now).
//   forward: out = gelu(x);  backward: dx = dout * gelu'(x) (written; dx may be dout). Any shape.
// All tensors share x's dtype: f32, or bf16 on the GPU (bf16 storage, fp32 arithmetic).
#pragma once

#include "core/tensor.h"

namespace tessera {

enum class GeluForm { tanh, exact };

void gelu_forward(Tensor& out, const Tensor& x, GeluForm form = GeluForm::tanh);
void gelu_backward(Tensor& dx, const Tensor& dout, const Tensor& x, GeluForm form = GeluForm::tanh);

}  // namespace tessera
