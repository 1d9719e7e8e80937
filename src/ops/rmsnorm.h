// RMSNorm over the last dimension C (Llama): out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps);
//   forward saves rstd (N) for backward.  backward: dx = ... (written, or added with GradInto::add);
//   dweight += ... (accumulates).
//   residual_rmsnorm_forward: residual_out = a + b, then rmsnorm_forward of residual_out; the same
//   values as residual_forward followed by rmsnorm_forward (the CPU runs exactly those two kernels).
// Shapes: x/out/dout/dx (N,C) or (B,T,C), weight (C), rstd (N) or (B,T). eps > 0 (Llama: 1e-5 or 1e-6).
// Dtypes: x, out, dout, dx and weight share one (f32, or bf16 or f16 on the GPU: 16-bit storage, fp32
// arithmetic; the CPU is the fp32 reference); rstd and dweight are f32.
#pragma once

#include "core/tensor.h"
#include "ops/grad_into.h"

namespace tessera {

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, float eps);
void residual_rmsnorm_forward(Tensor& residual_out, Tensor& out, Tensor& rstd, const Tensor& a, const Tensor& b,
                              const Tensor& weight, float eps);
void rmsnorm_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                      const Tensor& rstd, GradInto into = GradInto::write);

// RMSNorm of rows split over a group of ranks, each holding C of a row's `width` channels (OLMo 2's
// query and key norms under tensor parallelism). rmsnorm_partial_sums writes this rank's share of each
// row's Σ x² into sums (N) f32; summed over the group, rmsnorm_grouped_forward finishes as
// rmsnorm_forward would over whole rows. Backward likewise: rmsnorm_partial_dots writes the share of
// Σ dout·weight·xhat (xhat = x·rstd), and rmsnorm_grouped_backward takes the group's sums.
void rmsnorm_partial_sums(Tensor& sums, const Tensor& x);
void rmsnorm_grouped_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, const Tensor& sums,
                             int64_t width, float eps);
void rmsnorm_partial_dots(Tensor& dots, const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd);
void rmsnorm_grouped_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                              const Tensor& rstd, const Tensor& dots, int64_t width, GradInto into = GradInto::write);

}  // namespace tessera
