// Residual connection: out = a + b (forward). Its backward sends dout to both inputs, so the model
// only needs the in-place accumulation: acc += x. Same shapes, and one dtype: f32, or bf16 on the
// GPU (the sum is taken in fp32 and rounded once).
#pragma once

#include "core/tensor.h"

namespace tessera {

void residual_forward(Tensor& out, const Tensor& a, const Tensor& b);
void add_inplace(Tensor& acc, const Tensor& x);

}  // namespace tessera
