// The vocabulary-parallel cross-entropy's local parts on the CPU, parallel over rows; the same
// arithmetic as softmax_cross_entropy's (exp_approx), split at the reductions over the ranks.
#include "ops/cpu/cross_entropy_shard_cpu.h"

#include <algorithm>
#include <cmath>

#include "core/ignored_target.h"
#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void cross_entropy_shard_stats(float* max, float* sum_exp, float* target_logit, const float* logits,
                               const int32_t* targets, int64_t N, int64_t Vs, int64_t first_col, int64_t real) {
#pragma omp parallel for schedule(static) if (N * Vs >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* x = logits + n * Vs;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t v = 0; v < real; v++) m = std::max(m, x[v]);
    float s = 0.0f;
    if (real > 0) {
#pragma omp simd reduction(+ : s)
      for (int64_t v = 0; v < real; v++) s += exp_approx(x[v] - m);
    }
    const int64_t t = int64_t(targets[n]) - first_col;
    max[n] = m;
    sum_exp[n] = s;
    target_logit[n] = t >= 0 && t < real ? x[t] : 0.0f;
  }
}

void cross_entropy_shard_rescale(float* sum_exp, const float* local_max, const float* global_max, int64_t N) {
  for (int64_t n = 0; n < N; n++)
    sum_exp[n] = local_max[n] == -INFINITY ? 0.0f : sum_exp[n] * std::exp(local_max[n] - global_max[n]);
}

void cross_entropy_shard_finish(float* losses, float* logits, const int32_t* targets, const float* max,
                                const float* sum_exp, const float* target_logit, int64_t N, int64_t Vs,
                                int64_t first_col, int64_t real, float dloss, float softcap) {
  const bool capped = softcap > 0.0f;  // the gradient then carried back through the cap
  const float inv_cap = capped ? 1.0f / softcap : 0.0f;
#pragma omp parallel for schedule(static) if (N * Vs >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    float* x = logits + n * Vs;
    if (targets[n] == kIgnoredTarget) {
      losses[n] = 0.0f;
      if (dloss != 0.0f) std::fill(x, x + Vs, 0.0f);
      continue;
    }
    losses[n] = std::log(sum_exp[n]) + max[n] - target_logit[n];
    if (dloss == 0.0f) continue;
    const float m = max[n], scale = dloss / sum_exp[n];
    const int64_t t = int64_t(targets[n]) - first_col;
    const float target_grad = capped ? dloss * soft_cap_derivative(target_logit[n], inv_cap) : dloss;
#pragma omp simd
    for (int64_t v = 0; v < real; v++)
      x[v] = exp_approx(x[v] - m) * scale * (capped ? soft_cap_derivative(x[v], inv_cap) : 1.0f);
    std::fill(x + real, x + Vs, 0.0f);
    if (t >= 0 && t < real) x[t] -= target_grad;
  }
}

}  // namespace tessera::cpu
