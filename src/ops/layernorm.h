// LayerNorm over the last dimension C (eps = 1e-5).
//   forward:  out = (x - mean) * rstd * weight + bias; saves mean and rstd (N) for backward.
//   backward: dx = ... (written);  dweight += ..., dbias += ... (accumulate).
// Shapes: x/out/dout/dx (N,C) or (B,T,C), weight/bias (C), mean/rstd (N) or (B,T).
#pragma once

#include "core/tensor.h"

namespace tessera {

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                       const Tensor& bias);
void layernorm_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd);

}  // namespace tessera
