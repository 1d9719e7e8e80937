// Permuting tokens into expert order and back. An assignment a = n*K + k is token n's k-th choice;
// `order` lists the kept assignments sorted by expert (stable in a), and pos(n,k) is the position of
// assignment n*K + k in it. N tokens of C channels, K choices each, E experts, M kept assignments.
// Gradient contract: every backward here WRITES its outputs (=), nothing accumulates.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera {

// Plans the permutation from experts (N,K) i32 (on the CPU or the device).
//   order (N*K) i32 written: the kept assignments sorted by expert, stable in a (so within an expert
//     by token, then slot); entries past the returned M are -1.
//   offsets (E+1) i32 written, always a host (CPU) tensor: expert e's rows are
//     [offsets[e], offsets[e+1]) of the sorted order; offsets[0] = 0, offsets[E] = M.
//   capacity > 0: each expert keeps only its first `capacity` assignments in that order and the rest
//     are DROPPED (absent from order); capacity == 0: dropless.
// Returns M, the number of kept assignments. num_experts = E.
int64_t moe_dispatch_plan(Tensor& order, Tensor& offsets, const Tensor& experts, int64_t num_experts, int64_t capacity);

// xs (M_rows,C), M_rows >= M: rows i < M written, xs[i] = x[order[i] / K]; rows >= M untouched. x (N,C).
void moe_gather(Tensor& xs, const Tensor& x, const Tensor& order, int64_t M, int64_t K);
// dx (N,C) WRITTEN: dx[n] = sum over token n's kept assignments, in k order, of dxs[pos(n,k)]; 0 for
// a token with none kept. dxs (M_rows,C).
void moe_gather_backward(Tensor& dx, const Tensor& dxs, const Tensor& order, int64_t M, int64_t K);

// out (N,C) WRITTEN: out[n] = sum_k weights[n,k] * ys[pos(n,k)] over token n's kept assignments,
// summed in k order (dropped ones contribute 0). ys (M_rows,C), weights (N,K) f32.
void moe_combine(Tensor& out, const Tensor& ys, const Tensor& weights, const Tensor& order, int64_t M, int64_t K);
// dys (M_rows,C), rows < M WRITTEN: dys[pos(n,k)] = weights[n,k] * dout[n];
// dweights (N,K) WRITTEN: dot(dout[n], ys[pos(n,k)]) for kept assignments, 0 for dropped ones.
void moe_combine_backward(Tensor& dys, Tensor& dweights, const Tensor& dout, const Tensor& ys, const Tensor& weights,
                          const Tensor& order, int64_t M, int64_t K);

}  // namespace tessera
