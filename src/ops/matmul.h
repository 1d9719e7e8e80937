// Linear layer through BLAS: Y = X W^T + b, W stored (OC, C) as in torch.nn.Linear.
//   forward:  out (N,OC) = x (N,C) * weight^T + bias; bias may be undefined (no bias).
//   backward: dx (N,C) = dout * weight (written); dweight (OC,C) += dout^T x; dbias (OC) += sum_n dout.
// Leading dimensions of x/out may be (B,T,...) — everything but the last is flattened into N.
#pragma once

#include "core/tensor.h"

namespace tessera {

void matmul_forward(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias);
// dx may be undefined when the input needs no gradient; dbias undefined when there is no bias.
void matmul_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                     const Tensor& weight);

}  // namespace tessera
