// CUDA launchers of the MoE router and token permutation (contracts in ops/moe_router.h and
// ops/moe_dispatch.h). Raw device pointers, queued on `stream`; each checks its launch. Storage T =
// float, __nv_bfloat16 or __half for the router's logits and dlogits and the permuted rows (arithmetic
// fp32); scores, weights, lse, dweights f32; experts, order and pos i32. The router runs one warp per
// token, so E <= kMaxRouterExperts. pos (N*K) is the inverse of order, -1 for dropped assignments
// (moe_positions writes it); every row of an output is written by one block, terms summed in k order,
// so results are deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

constexpr int64_t kMaxRouterExperts = 256;

// experts (N,K), weights (N,K), scores (N,E), lse (N) from logits (N,E); bias (E) f32 or null;
// renormalize: the weights divided by their sum; groups and kept_groups: DeepSeek's group limit
// (ops/moe_router.h's RouterGroups; groups 1: none).
template <typename T>
void moe_router_forward(int32_t* experts, float* weights, float* scores, float* lse, const T* logits, const float* bias,
                        bool use_sigmoid, bool renormalize, int64_t groups, int64_t kept_groups, int64_t N, int64_t E,
                        int64_t K, cudaStream_t stream);
// dlogits (N,E) written; experts must hold ids in [0, E). The aux term's counts (E, device) and
// token count are aux_counts and aux_tokens when aux_counts is given, else this routing's own.
template <typename T>
void moe_router_backward(T* dlogits, const float* dweights, const int32_t* experts, const float* weights,
                         const float* scores, const float* lse, const T* logits, bool use_sigmoid, bool renormalize,
                         float aux_scale, float z_scale, int64_t N, int64_t E, int64_t K, cudaStream_t stream,
                         const int32_t* aux_counts = nullptr, double aux_tokens = 0);

// pos (NK) written from order (its first M entries).
void moe_positions(int32_t* pos, const int32_t* order, int64_t M, int64_t NK, cudaStream_t stream);
// xs rows i < M = x[order[i] / K]; x (N,C).
template <typename T>
void moe_gather(T* xs, const T* x, const int32_t* order, int64_t M, int64_t K, int64_t C, cudaStream_t stream);
// out (N,C) written: out[n] = sum_k w(n,k) rows[pos(n,k)] over kept assignments, w = weights[n,k], or 1
// when weights is null (the gather's backward).
template <typename T>
void moe_sum_token_rows(T* out, const T* rows, const float* weights, const int32_t* pos, int64_t N, int64_t K,
                        int64_t C, cudaStream_t stream);
// dys rows i < M = weights[a] dout[a / K] and dweights[a] = dot(dout[a / K], ys[i]) for a = order[i];
// dweights (N,K) entries of dropped assignments 0.
template <typename T>
void moe_combine_backward(T* dys, float* dweights, const T* dout, const T* ys, const float* weights,
                          const int32_t* order, int64_t M, int64_t N, int64_t K, int64_t C, cudaStream_t stream);

}  // namespace tessera::cuda
