// CPU kernels of the MoE token permutation (contract in ops/moe_dispatch.h). NK = N*K assignments;
// order holds NK entries, the first M of them valid; ids and order values are already checked.
#pragma once

#include <cstdint>

namespace tessera::cpu {

// order (NK) and offsets (E+1) written; returns M.
int64_t moe_dispatch_plan(int32_t* order, int32_t* offsets, const int32_t* experts, int64_t NK, int64_t E,
                          int64_t capacity);
// xs rows [0, M) written from x (N,C).
void moe_gather(float* xs, const float* x, const int32_t* order, int64_t M, int64_t K, int64_t C);
// dx (N,C) written from dxs (M rows).
void moe_gather_backward(float* dx, const float* dxs, const int32_t* order, int64_t M, int64_t N, int64_t K, int64_t C);
// out (N,C) written from ys (M rows) and weights (N,K).
void moe_combine(float* out, const float* ys, const float* weights, const int32_t* order, int64_t M, int64_t N,
                 int64_t K, int64_t C);
// dys rows [0, M) and dweights (N,K) written.
void moe_combine_backward(float* dys, float* dweights, const float* dout, const float* ys, const float* weights,
                          const int32_t* order, int64_t M, int64_t N, int64_t K, int64_t C);

}  // namespace tessera::cpu
