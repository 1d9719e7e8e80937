// Linear layer through BLAS: Y = X W^T + b, W stored (OC, C) as in torch.nn.Linear.
//   forward:  out (N,OC) = x (N,C) * weight^T + bias; bias may be undefined (no bias).
//   backward: dx (N,C) = dout * weight (written); dweight (OC,C) += dout^T x; dbias (OC) += sum_n dout.
// Leading dimensions of x/out may be (B,T,...) — everything but the last is flattened into N.
// Dtypes: x, weight, bias, out, dout, dx (and pre_gelu) share one activation dtype, f32 anywhere or
// bf16 on the GPU (fp32 accumulation); dweight and dbias are always f32.
#pragma once

#include "core/tensor.h"
#include "ops/matmul_tuning.h"

namespace tessera {

// `choice` says how the GPU picks the algorithm (ops/matmul_tuning.h); the CPU ignores it.
void matmul_forward(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                    MatmulAlgoChoice choice = MatmulAlgoChoice::exact);
// dx may be undefined when the input needs no gradient; dbias undefined when there is no bias;
// dweight (and dbias) undefined when the weight gradient is taken by a later call (zero-bubble's split).
void matmul_backward(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                     const Tensor& weight, MatmulAlgoChoice choice = MatmulAlgoChoice::exact);

// The linear layer followed by GELU (the MLP's first half), one cuBLASLt call on the GPU:
//   pre_gelu (N,OC) = x W^T + b (kept for the backward);  out (N,OC) = gelu(pre_gelu), the tanh
//   approximation of ops/gelu.h. Equals matmul_forward then gelu_forward (exactly so on the CPU).
// On the GPU, OC must be a multiple of 8 (cuBLASLt's rule for the pre-GELU matrix); bias may be undefined.
void matmul_gelu_forward(Tensor& out, Tensor& pre_gelu, const Tensor& x, const Tensor& weight, const Tensor& bias);
// Backward of the linear layer after a GELU, Y = X W^T + b with X = gelu(x_pre_gelu), carried
// through the GELU (the MLP's second half):
//   dx (N,C) = (dout W) * gelu'(x_pre_gelu)  (written: the gradient of x_pre_gelu);
//   dweight (OC,C) += dout^T x;  dbias (OC) += sum_n dout (undefined: no bias).
// Equals matmul_backward then gelu_backward (exactly so on the CPU); on the GPU gelu' is applied to
// the fp32 product before rounding to the activation dtype. On the GPU, C must be a multiple of 8.
void matmul_backward_dgelu(Tensor& dx, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& x,
                           const Tensor& weight, const Tensor& x_pre_gelu);

}  // namespace tessera
