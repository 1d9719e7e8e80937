// CPU kernels of the gradient-clipping reductions (contract in ops/norm.h).
#pragma once

#include <cstdint>

namespace tessera::cpu {

// sum_i x[i]^2 over n elements, accumulated in double.
double squared_norm(const float* x, int64_t n);
// x (n) *= factor.
void scale_inplace(float* x, int64_t n, float factor);

}  // namespace tessera::cpu
