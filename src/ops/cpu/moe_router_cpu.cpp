// The MoE router on the CPU, parallel over tokens (rows); every row is computed by one thread in a
// fixed order, so any thread count gives the same bits. Top-K is K scans of the row, each taking the
// best value strictly after the previous choice in (value descending, index ascending) order: no
// scratch beyond a row of selection values (DeepSeek's group limit applied to them first), ties to the
// lower index, and a NaN is never chosen (its slot is left -1). The losses
// are sums in double on one thread: O(N*E), small beside the experts' GEMMs.
#include "ops/cpu/moe_router_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

// Writes scores (E) and returns logsumexp of the logits row.
float score_row(float* s, const float* l, bool use_sigmoid, int64_t E) {
  float max_l = -INFINITY;
#pragma omp simd reduction(max : max_l)
  for (int64_t e = 0; e < E; e++) max_l = std::max(max_l, l[e]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t e = 0; e < E; e++) {
    s[e] = exp_approx(l[e] - max_l);
    sum += s[e];
  }
  if (use_sigmoid) {
#pragma omp simd
    for (int64_t e = 0; e < E; e++) s[e] = sigmoid(l[e]);
  } else {
    const float inv_sum = 1.0f / sum;
#pragma omp simd
    for (int64_t e = 0; e < E; e++) s[e] *= inv_sum;
  }
  return max_l + std::log(sum);
}

// v (E): the selection values s[e] + bias[e]; with groups, DeepSeek's group limit applied: the kept
// groups are those of the best scores (the sum of the two best values with sigmoid scoring, the best
// one with softmax; ties to the lower group), every other expert's value 0.
void selection_values(float* v, const float* s, const float* bias, bool use_sigmoid, int64_t groups,
                      int64_t kept_groups, int64_t E) {
  for (int64_t e = 0; e < E; e++) v[e] = bias != nullptr ? s[e] + bias[e] : s[e];
  if (groups <= 1) return;
  const int64_t size = E / groups;
  std::vector<float> score(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; g++) {
    float best = -INFINITY, second = -INFINITY;
    for (int64_t e = g * size; e < (g + 1) * size; e++) {
      if (v[e] > best) {
        second = best;
        best = v[e];
      } else if (v[e] > second) {
        second = v[e];
      }
    }
    score[size_t(g)] = use_sigmoid ? best + second : best;
  }
  std::vector<bool> kept(static_cast<size_t>(groups), false);
  for (int64_t k = 0; k < kept_groups; k++) {
    int64_t pick = -1;
    for (int64_t g = 0; g < groups; g++)
      if (!kept[size_t(g)] && (pick < 0 || score[size_t(g)] > score[size_t(pick)])) pick = g;
    kept[size_t(pick)] = true;
  }
  for (int64_t e = 0; e < E; e++)
    if (!kept[size_t(e / size)]) v[e] = 0.0f;
}

// chosen (K): the experts of the K largest v[e], largest first, ties to the lower index.
void top_k_row(int32_t* chosen, const float* v, int64_t E, int64_t K) {
  float prev_v = INFINITY;
  int64_t prev_e = -1;
  for (int64_t k = 0; k < K; k++) {
    int64_t best = -1;
    float best_v = 0.0f;
    for (int64_t e = 0; e < E; e++) {
      const bool after_prev = v[e] < prev_v || (v[e] == prev_v && e > prev_e);  // false for NaN
      if (after_prev && (best < 0 || v[e] > best_v)) {
        best = e;
        best_v = v[e];
      }
    }
    chosen[k] = int32_t(best);
    if (best < 0) continue;  // only NaNs left: the slot stays -1, which dispatch refuses
    prev_v = best_v;
    prev_e = best;
  }
}

// aux_scale * E * count_e / N^2: d(aux_scale * aux) / d p[n,e], the same for every row; count_e and
// N are the given ones (aux_counts, aux_tokens), or else this routing's.
std::vector<float> aux_gradient(const int32_t* experts, float aux_scale, int64_t N, int64_t E, int64_t K,
                                const double* aux_counts, double aux_tokens) {
  std::vector<double> count(size_t(E), 0.0);
  if (aux_counts) {
    std::copy(aux_counts, aux_counts + E, count.begin());
  } else {
    for (int64_t a = 0; a < N * K; a++) count[size_t(experts[a])] += 1.0;
    aux_tokens = double(N);
  }
  std::vector<float> c(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; e++)
    c[size_t(e)] = float(double(aux_scale) * double(E) * count[size_t(e)] / (aux_tokens * aux_tokens));
  return c;
}

}  // namespace

void moe_router_forward(int32_t* experts, float* weights, float* scores, float* lse, const float* logits,
                        const float* bias, bool use_sigmoid, bool renormalize, int64_t groups, int64_t kept_groups,
                        int64_t N, int64_t E, int64_t K) {
#pragma omp parallel if (N * E >= kMinParallelElements)
  {
    std::vector<float> v(static_cast<size_t>(E));  // one row's selection values, per thread
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
      float* s = scores + n * E;          // (E)
      int32_t* chosen = experts + n * K;  // (K)
      float* w = weights + n * K;         // (K)
      lse[n] = score_row(s, logits + n * E, use_sigmoid, E);
      selection_values(v.data(), s, bias, use_sigmoid, groups, kept_groups, E);
      top_k_row(chosen, v.data(), E, K);
      float sum = 0.0f;
      for (int64_t k = 0; k < K; k++) w[k] = chosen[k] >= 0 ? s[chosen[k]] : NAN;
      for (int64_t k = 0; k < K; k++) sum += w[k];
      if (renormalize)
        for (int64_t k = 0; k < K; k++) w[k] /= sum;
    }
  }
}

double moe_router_statistics(double* count, double* p_sum, const int32_t* experts, const float* scores,
                             const float* lse, bool use_sigmoid, int64_t N, int64_t E, int64_t K) {
  std::fill(count, count + E, 0.0);
  std::fill(p_sum, p_sum + E, 0.0);
  if (N == 0) return 0.0;
  for (int64_t a = 0; a < N * K; a++) count[size_t(experts[a])] += 1.0;
  double z = 0.0;
  for (int64_t n = 0; n < N; n++) {
    const float* s = scores + n * E;  // (E)
    double row_scale = 1.0;
    if (use_sigmoid) {
      double row_sum = 0.0;
      for (int64_t e = 0; e < E; e++) row_sum += s[e];
      row_scale = 1.0 / row_sum;
    }
    for (int64_t e = 0; e < E; e++) p_sum[size_t(e)] += double(s[e]) * row_scale;
    z += double(lse[n]) * double(lse[n]);
  }
  return z / double(N);
}

// Per row, ds = dL/dscores is built in the dlogits row, then carried through the score function:
//   weights: ds[e_k] += (dw_k - sum_j dw_j w_j) / S, S = sum_j s[e_j]   (w_k = s[e_k] / S)
//            or, not renormalised (w_k = s[e_k]), ds[e_k] += dw_k
//   aux:     softmax ds[e] += c_e;  sigmoid ds[e] += (c_e - sum_j c_j p_j) / T, p = s / T, T = sum_e s
//   scores:  softmax dl = s * (ds - sum_e ds_e s_e);  sigmoid dl = ds * s * (1 - s)
//   z:       dl += (2 z_scale lse / N) * softmax(l), softmax(l) = exp(l - lse) (= s for softmax)
void moe_router_backward(float* dlogits, const float* dweights, const int32_t* experts, const float* weights,
                         const float* scores, const float* lse, const float* logits, bool use_sigmoid,
                         bool renormalize, float aux_scale, float z_scale, int64_t N, int64_t E, int64_t K,
                         const double* aux_counts, double aux_tokens) {
  const std::vector<float> c = aux_gradient(experts, aux_scale, N, E, K, aux_counts, aux_tokens);
  const float dz = N > 0 ? 2.0f * z_scale / float(N) : 0.0f;
#pragma omp parallel for schedule(static) if (N * E >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* s = scores + n * E;          // (E)
    const float* l = logits + n * E;          // (E)
    const int32_t* chosen = experts + n * K;  // (K)
    const float* w = weights + n * K;         // (K)
    const float* dw = dweights + n * K;       // (K)
    float* d = dlogits + n * E;               // (E)
    if (use_sigmoid) {
      float T = 0.0f, cs = 0.0f;
      for (int64_t e = 0; e < E; e++) {
        T += s[e];
        cs += c[size_t(e)] * s[e];
      }
      const float cp = cs / T;  // sum_j c_j p_j
      for (int64_t e = 0; e < E; e++) d[e] = (c[size_t(e)] - cp) / T;
    } else {
      std::copy(c.begin(), c.end(), d);
    }
    float S = 0.0f, dw_w = 0.0f;
    for (int64_t k = 0; k < K; k++) {
      S += s[chosen[k]];
      dw_w += dw[k] * w[k];
    }
    for (int64_t k = 0; k < K; k++) d[chosen[k]] += renormalize ? (dw[k] - dw_w) / S : dw[k];
    const float dlse = dz * lse[n];
    if (use_sigmoid) {
#pragma omp simd
      for (int64_t e = 0; e < E; e++) d[e] = d[e] * s[e] * (1.0f - s[e]) + dlse * exp_approx(l[e] - lse[n]);
    } else {
      float ds_s = 0.0f;
      for (int64_t e = 0; e < E; e++) ds_s += d[e] * s[e];
#pragma omp simd
      for (int64_t e = 0; e < E; e++) d[e] = s[e] * (d[e] - ds_s) + dlse * s[e];
    }
  }
}

}  // namespace tessera::cpu
