// One query tile of one head against a prefix of its keys, forward and backward (contract in
// ops/cpu/attention_tile.h). Entries outside a row's visible keys are zeroed after the score GEMM, so
// the GEMMs that follow see exact zeros there. The backward takes dp = dout v^T first, so a soft cap's
// derivative joins dp - D while the capped scores are at hand, before they become probabilities.
#include "ops/cpu/attention_tile.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

// s (rows, cols) = scale * q (rows, HS) * k (cols, HS)^T.
void tile_scores(float* s, const AttentionTile& t) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(t.rows), int(t.cols), int(t.HS), t.scale, t.q,
              int(t.ldq), t.k, int(t.ldkv), 0.0f, s, int(t.cols));
}

// The soft cap on a score row's keys [first, visible): s = cap tanh(s / cap).
void cap_row(float* s, int64_t first, int64_t visible, float cap) {
  const float inv = 1.0f / cap;
#pragma omp simd
  for (int64_t j = first; j < visible; j++) s[j] = soft_cap(s[j], cap, inv);
}

// cap_row, and the capped scores' gradient dp carried back to the raw ones: dp *= 1 - tanh^2.
void cap_row_backward(float* s, float* dp, int64_t first, int64_t visible, float cap) {
  const float inv = 1.0f / cap;
#pragma omp simd
  for (int64_t j = first; j < visible; j++) {
    const float t = tanh_approx(s[j] * inv);
    s[j] = cap * t;
    dp[j] *= 1.0f - t * t;
  }
}

// One score row (cols) becomes exp(s - shift) on its keys [first, visible) and 0 elsewhere; returns
// the sum of the exponentials.
float masked_exp_row(float* s, int64_t first, int64_t visible, int64_t cols, float shift) {
  float sum = 0.0f;
  std::fill(s, s + std::min(first, cols), 0.0f);
#pragma omp simd reduction(+ : sum)
  for (int64_t j = first; j < visible; j++) {
    s[j] = exp_approx(s[j] - shift);
    sum += s[j];
  }
  std::fill(s + std::max(first, visible), s + cols, 0.0f);
  return sum;
}

}  // namespace

HeadOffsets head_offsets(int64_t h, int64_t HS, int64_t NH, int64_t NKV) {
  const int64_t g = h / (NH / NKV);
  return {h * HS, NH * HS + g * HS, (NH + NKV) * HS + g * HS};
}

void attention_tile_forward(const AttentionTile& t, float* o, int64_t ldo, float* lse, float* p) {
  float row_sum[kAttentionTile];
  tile_scores(p, t);
  for (int64_t i = 0; i < t.rows; i++) {  // softmax numerators over the row's visible keys
    float* p_i = p + i * t.cols;
    const int64_t first = t.first_key(i);
    if (t.softcap > 0.0f) cap_row(p_i, first, t.visible[i], t.softcap);
    float max_s = -INFINITY;
#pragma omp simd reduction(max : max_s)
    for (int64_t j = first; j < t.visible[i]; j++) max_s = std::max(max_s, p_i[j]);
    if (max_s == -INFINITY) max_s = 0.0f;  // a row without keys: all zeros, lse -inf
    row_sum[i] = masked_exp_row(p_i, first, t.visible[i], t.cols, max_s);
    lse[i] = max_s + std::log(row_sum[i]);
  }
  // o (rows, HS) = p (rows, cols) * v (cols, HS), then each row divided by its sum
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(t.rows), int(t.HS), int(t.cols), 1.0f, p, int(t.cols),
              t.v, int(t.ldkv), 0.0f, o, int(ldo));
  for (int64_t i = 0; i < t.rows; i++) {
    const float inv = row_sum[i] > 0.0f ? 1.0f / row_sum[i] : 0.0f;
#pragma omp simd
    for (int64_t d = 0; d < t.HS; d++) o[i * ldo + d] *= inv;
  }
}

void attention_tile_backward(const AttentionTile& t, const AttentionTileGrads& g, float* p, float* dp) {
  const int rows = int(t.rows), cols = int(t.cols), HS = int(t.HS);
  // dp (rows, cols) = dout (rows, HS) * v (cols, HS)^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, HS, 1.0f, g.dout, int(g.ldo), t.v, int(t.ldkv),
              0.0f, dp, cols);
  tile_scores(p, t);
  for (int64_t i = 0; i < t.rows; i++) {  // dp - D (times the cap's derivative), p the probabilities
    float *p_i = p + i * cols, *dp_i = dp + i * cols;
    const float delta = g.delta[i];
#pragma omp simd
    for (int64_t j = 0; j < cols; j++) dp_i[j] -= delta;
    if (t.softcap > 0.0f) cap_row_backward(p_i, dp_i, t.first_key(i), t.visible[i], t.softcap);
    masked_exp_row(p_i, t.first_key(i), t.visible[i], cols, g.lse[i]);
  }
  // dv (cols, HS) += p^T (cols, rows) * dout (rows, HS)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, HS, rows, 1.0f, p, cols, g.dout, int(g.ldo), 1.0f,
              g.dv, int(t.ldkv));
  // dS = p * (dp - D), written over p
#pragma omp simd
  for (int64_t i = 0; i < t.rows * cols; i++) p[i] *= dp[i];
  // dq (rows, HS) = dq_beta * dq + scale * dS (rows, cols) * k (cols, HS)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, cols, t.scale, p, cols, t.k, int(t.ldkv),
              g.dq_beta, g.dq, int(t.ldq));
  // dk (cols, HS) += scale * dS^T (cols, rows) * q (rows, HS)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, HS, rows, t.scale, p, cols, t.q, int(t.ldq), 1.0f,
              g.dk, int(t.ldkv));
}

float attention_row_delta(const float* dout, const float* out, int64_t HS) {
  float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
  for (int64_t d = 0; d < HS; d++) delta += dout[d] * out[d];
  return delta;
}

}  // namespace tessera::cpu
