// The experts' linear layers over their contiguous row groups ("grouped GEMM"): rows
// [offsets[e], offsets[e+1]) of x belong to expert e, whose weight is weight[e] (OC,C) as in
// torch.nn.Linear. One GEMM per non-empty group, no per-token loops. E experts, M = offsets[E].
//   forward:  out[rows of e] = x[rows of e] * weight[e]^T; rows >= M untouched.
//   backward: dx[rows of e] = dout[rows of e] * weight[e] (written); dweight[e] += dout_e^T x_e.
// offsets (E+1) i32 is a host (CPU) tensor: 0 = offsets[0] <= offsets[1] <= ... <= offsets[E] <= M_rows.
#pragma once

#include "core/tensor.h"

namespace tessera {

// out (M_rows,OC) rows < offsets[E] written; x (M_rows,C); weight (E,OC,C).
void grouped_matmul_forward(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& offsets);
// dx (M_rows,C) rows < offsets[E] written, or undefined when x needs no gradient; dweight (E,OC,C) f32
// accumulates (+=), or undefined when a later call takes it; dout (M_rows,OC).
void grouped_matmul_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                             const Tensor& offsets);

}  // namespace tessera
