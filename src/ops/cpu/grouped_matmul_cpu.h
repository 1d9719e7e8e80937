// CPU kernels of the experts' grouped linear layers through OpenBLAS (contract in ops/grouped_matmul.h).
// offsets (E+1) are already checked: non-decreasing from 0.
#pragma once

#include <cstdint>

namespace tessera::cpu {

// out rows < offsets[E] (OC each) = x rows (C each) * weight[e]^T per group; weight (E,OC,C).
void grouped_matmul_forward(float* out, const float* x, const float* weight, const int32_t* offsets, int64_t E,
                            int64_t C, int64_t OC);
// dx rows < offsets[E] written (skipped when null); dweight (E,OC,C) +=.
void grouped_matmul_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                             const int32_t* offsets, int64_t E, int64_t C, int64_t OC);

}  // namespace tessera::cpu
