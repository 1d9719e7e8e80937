// Residual connection: out = a + b (forward). Its backward sends dout to both inputs, so the model
// only needs the in-place accumulation: acc += x. Same shapes.
#pragma once

#include "core/tensor.h"

namespace tessera {

void residual_forward(Tensor& out, const Tensor& a, const Tensor& b);
void add_inplace(Tensor& acc, const Tensor& x);

}  // namespace tessera
