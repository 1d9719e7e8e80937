// Reductions for gradient clipping: the sum of squares of a tensor (accumulated in double), and an
// in-place scale (also of activations: f32, or bf16 or f16 on the GPU). The global grad-norm is sqrt of
// the sum over all gradient tensors (and ranks).
#pragma once

#include "core/tensor.h"

namespace tessera {

double squared_norm(const Tensor& x);
void scale_inplace(Tensor& x, float factor);

}  // namespace tessera
