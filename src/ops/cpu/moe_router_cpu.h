// CPU kernels of the MoE router (contract in ops/moe_router.h). sigmoid selects the score kind
// (false: softmax), renormalize whether the chosen experts' weights are divided by their sum, groups
// and kept_groups the group limit (ops/moe_router.h's RouterGroups; groups 1: none);
// pointers are row-major (N,E), (N,K) and (N); bias may be null.
#pragma once

#include <cstdint>

namespace tessera::cpu {

void moe_router_forward(int32_t* experts, float* weights, float* scores, float* lse, const float* logits,
                        const float* bias, bool sigmoid, bool renormalize, int64_t groups, int64_t kept_groups,
                        int64_t N, int64_t E, int64_t K);
// aux's statistics: count_e (from experts (N,K)) and sum_n p[n,e] (from scores (N,E)) written into
// counts and prob_sums (E each); returns z (0 for N = 0).
double moe_router_statistics(double* counts, double* prob_sums, const int32_t* experts, const float* scores,
                             const float* lse, bool sigmoid, int64_t N, int64_t E, int64_t K);
// dlogits (N,E) written. The aux term's counts and token count are aux_counts (E) and aux_tokens
// when aux_counts is given, else this routing's own.
void moe_router_backward(float* dlogits, const float* dweights, const int32_t* experts, const float* weights,
                         const float* scores, const float* lse, const float* logits, bool sigmoid, bool renormalize,
                         float aux_scale, float z_scale, int64_t N, int64_t E, int64_t K,
                         const double* aux_counts = nullptr, double aux_tokens = 0);

}  // namespace tessera::cpu
