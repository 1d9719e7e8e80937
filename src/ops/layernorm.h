// LayerNorm over the last dimension C (eps = 1e-5), with a bias or (bias and dbias undefined) without one, as
// Cohere's; without, on the CPU only for now.
//   forward:  out = (x - mean) * rstd * weight + bias; saves mean and rstd (N) for backward.
//   backward: dx = ... (written, or added with GradInto::add);  dweight += ..., dbias += ... (accumulate).
//   residual_layernorm_forward: residual_out = a + b, then layernorm_forward of residual_out, fused
//   on the GPU; the same values as residual_forward followed by layernorm_forward.
// Shapes: x/out/dout/dx (N,C) or (B,T,C), weight/bias (C), mean/rstd (N) or (B,T).
// Dtypes: x, out, dout, dx, weight and bias share one (f32, or bf16 on the GPU); mean, rstd,
// dweight and dbias are always f32.
#pragma once

#include "core/tensor.h"
#include "ops/grad_into.h"

namespace tessera {

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                       const Tensor& bias);
void residual_layernorm_forward(Tensor& residual_out, Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& a,
                                const Tensor& b, const Tensor& weight, const Tensor& bias);
void layernorm_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd, GradInto into = GradInto::write);

}  // namespace tessera
