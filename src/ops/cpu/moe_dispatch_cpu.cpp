// The MoE token permutation on the CPU. The plan is a stable counting sort by expert on one thread
// (O(N*K)). Gather and the combine backward are parallel over sorted rows, the gather backward and
// the combine over tokens: each output row belongs to one thread and sums its terms in k order, so
// any thread count gives the same bits and nothing needs atomics. pos(n,k), the inverse of order,
// is built first (-1 for dropped assignments).
#include "ops/cpu/moe_dispatch_cpu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

// pos (N*K): the position of each assignment in order, -1 where it was dropped.
std::vector<int32_t> positions_of(const int32_t* order, int64_t M, int64_t NK) {
  std::vector<int32_t> pos(size_t(NK), -1);
  for (int64_t i = 0; i < M; i++) pos[size_t(order[i])] = int32_t(i);
  return pos;
}

// out[n] = sum over token n's kept assignments, in k order, of weight(n,k) * rows[pos(n,k)]; the
// weight is 1 without `weights` (the gather's backward), which multiplies exactly. Parallel over tokens.
void sum_token_rows(float* out, const float* rows, const float* weights, const int32_t* order, int64_t M, int64_t N,
                    int64_t K, int64_t C) {
  const std::vector<int32_t> pos = positions_of(order, M, N * K);
#pragma omp parallel for schedule(static) if (N * K * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    float* out_n = out + n * C;  // (C)
    std::fill(out_n, out_n + C, 0.0f);
    for (int64_t k = 0; k < K; k++) {
      const int32_t p = pos[size_t(n * K + k)];
      if (p < 0) continue;
      const float w = weights ? weights[n * K + k] : 1.0f;
      const float* row = rows + p * C;  // (C)
#pragma omp simd
      for (int64_t c = 0; c < C; c++) out_n[c] += w * row[c];
    }
  }
}

}  // namespace

int64_t moe_dispatch_plan(int32_t* order, int32_t* offsets, const int32_t* experts, int64_t NK, int64_t E,
                          int64_t capacity) {
  std::vector<int64_t> count(size_t(E), 0);
  for (int64_t a = 0; a < NK; a++) count[size_t(experts[a])]++;
  offsets[0] = 0;
  for (int64_t e = 0; e < E; e++) {
    const int64_t kept = capacity > 0 ? std::min(count[size_t(e)], capacity) : count[size_t(e)];
    offsets[e + 1] = int32_t(offsets[e] + kept);
  }
  // Assignments in increasing a go to the next free row of their expert, until its range is full.
  std::vector<int64_t> next(offsets, offsets + E);
  for (int64_t a = 0; a < NK; a++) {
    const int64_t e = experts[a];
    if (next[size_t(e)] < offsets[e + 1]) order[next[size_t(e)]++] = int32_t(a);
  }
  const int64_t M = offsets[E];
  std::fill(order + M, order + NK, -1);
  return M;
}

void moe_gather(float* xs, const float* x, const int32_t* order, int64_t M, int64_t K, int64_t C) {
#pragma omp parallel for schedule(static) if (M * C >= kMinParallelElements)
  for (int64_t i = 0; i < M; i++) std::memcpy(xs + i * C, x + (order[i] / K) * C, size_t(C) * sizeof(float));
}

void moe_gather_backward(float* dx, const float* dxs, const int32_t* order, int64_t M, int64_t N, int64_t K,
                         int64_t C) {
  sum_token_rows(dx, dxs, nullptr, order, M, N, K, C);
}

void moe_combine(float* out, const float* ys, const float* weights, const int32_t* order, int64_t M, int64_t N,
                 int64_t K, int64_t C) {
  sum_token_rows(out, ys, weights, order, M, N, K, C);
}

void moe_combine_backward(float* dys, float* dweights, const float* dout, const float* ys, const float* weights,
                          const int32_t* order, int64_t M, int64_t N, int64_t K, int64_t C) {
  std::fill(dweights, dweights + N * K, 0.0f);  // dropped assignments keep 0
#pragma omp parallel for schedule(static) if (M * C >= kMinParallelElements)
  for (int64_t i = 0; i < M; i++) {
    const int64_t a = order[i];
    const float w = weights[a];
    const float* dout_n = dout + (a / K) * C;  // (C)
    const float* ys_i = ys + i * C;            // (C)
    float* dys_i = dys + i * C;                // (C)
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; c++) {
      dys_i[c] = w * dout_n[c];
      dot += dout_n[c] * ys_i[c];
    }
    dweights[a] = dot;
  }
}

}  // namespace tessera::cpu
