// CPU kernels of RMSNorm over the last dimension (contract in ops/rmsnorm.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out (N,C), rstd (N) from x (N,C), weight (C).
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int64_t C, float eps);
// dx (N,C) written, or added to when add_to_dx; dweight (C) accumulated.
void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int64_t N, int64_t C, bool add_to_dx);

}  // namespace tessera::cpu
