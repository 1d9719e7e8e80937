// CPU kernels of RMSNorm over the last dimension (contract in ops/rmsnorm.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (N,C), rstd (N) from x (N,C), weight (C). With `sums`, each row is C of `width` channels split
// over a group and sums (N) holds the group's Σ x² (rmsnorm_grouped_forward).
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int64_t C, float eps,
                     const float* sums = nullptr, int64_t width = 0);
// dx (N,C) written, or added to when add_to_dx; dweight (C) accumulated. With `dots`, the group's
// Σ dout·weight·xhat of each row of `width` channels (rmsnorm_grouped_backward).
void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int64_t N, int64_t C, bool add_to_dx, const float* dots = nullptr,
                      int64_t width = 0);
// A grouped row's share of its statistics: sums (N) = Σ x², dots (N) = Σ dout·weight·x·rstd.
void rmsnorm_partial_sums(float* sums, const float* x, int64_t N, int64_t C);
void rmsnorm_partial_dots(float* dots, const float* dout, const float* x, const float* weight, const float* rstd,
                          int64_t N, int64_t C);

}  // namespace tessera::cpu
