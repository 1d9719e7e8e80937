// Softmax + cross-entropy on the CPU, parallel over rows. A row is read once for its max and once
// for exp(x - max), which is stored in place when a gradient is asked for and then scaled into it:
//   loss = log(sum_v exp(x_v - max)) - (x_target - max);   grad = dloss * (softmax - onehot(target)).
// An ignored target's row: loss 0, gradient 0. Capped logits y take the cap's derivative 1 - (y / cap)^2
// as their exponentials are stored, while y is still at hand.
#include "ops/cpu/cross_entropy_cpu.h"

#include <algorithm>
#include <cmath>

#include "core/ignored_target.h"
#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

template <bool kCapped>
void softmax_cross_entropy_rows(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                                float dloss, float softcap) {
  const float inv_cap = kCapped ? 1.0f / softcap : 0.0f;
#pragma omp parallel for schedule(static) if (N * V >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    float* x = logits + n * Vp;  // (Vp)
    const int64_t target = targets[n];
    if (target == kIgnoredTarget) {
      losses[n] = 0.0f;
      if (dloss != 0.0f) std::fill(x, x + Vp, 0.0f);
      continue;
    }
    float max_x = -INFINITY;
#pragma omp simd reduction(max : max_x)
    for (int64_t v = 0; v < V; v++) max_x = std::max(max_x, x[v]);
    const float x_target = x[target];
    float sum = 0.0f;
    if (dloss == 0.0f) {
#pragma omp simd reduction(+ : sum)
      for (int64_t v = 0; v < V; v++) sum += exp_approx(x[v] - max_x);
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t v = 0; v < V; v++) {
        const float e = exp_approx(x[v] - max_x);
        sum += e;
        x[v] = kCapped ? e * soft_cap_derivative(x[v], inv_cap) : e;
      }
    }
    losses[n] = std::log(sum) - (x_target - max_x);  // subtract first: both can be huge
    if (dloss == 0.0f) continue;
    const float grad_scale = dloss / sum;
#pragma omp simd
    for (int64_t v = 0; v < V; v++) x[v] *= grad_scale;
    x[target] -= kCapped ? dloss * soft_cap_derivative(x_target, inv_cap) : dloss;
    std::fill(x + V, x + Vp, 0.0f);
  }
}

}  // namespace

void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                           float dloss, float softcap) {
  if (softcap > 0.0f) return softmax_cross_entropy_rows<true>(losses, logits, targets, N, V, Vp, dloss, softcap);
  softmax_cross_entropy_rows<false>(losses, logits, targets, N, V, Vp, dloss, softcap);
}

}  // namespace tessera::cpu
