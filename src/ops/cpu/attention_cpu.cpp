// Causal attention on the CPU, flash style. Forward threads take (b, query head) pairs, backward
// threads (b, kv head) pairs and walk the query heads of the group in order, so dk and dv of a shared
// kv head accumulate on one thread in a fixed order. Each head walks the queries in tiles of kTile
// rows, and a tile of rows [r0, r1) only sees keys [0, r1), so the GEMMs skip the masked upper
// triangle except inside the diagonal block. Scores live in one (kTile, T) scratch per thread; the
// GEMMs read q, k, v in place (row stride W = (NH + 2*NKV) * HS) and, inside the OpenMP region, run
// on the calling thread. Backward recomputes each tile's probabilities from the saved log-sum-exp.
#include "ops/cpu/attention_cpu.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kTile = 64;  // query rows per tile

// s (rows, cols) = scale * q_tile (rows, HS) * k (cols, HS)^T; q and k rows are ld floats apart.
void tile_scores(float* s, const float* q_tile, const float* k, int64_t rows, int64_t cols, int64_t HS, int64_t ld,
                 float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(cols), int(HS), scale, q_tile, int(ld), k,
              int(ld), 0.0f, s, int(cols));
}

// One score row (cols) becomes exp(s - shift) on its `visible` causal keys and 0 past them;
// returns the sum of the exponentials.
float masked_exp_row(float* s, int64_t visible, int64_t cols, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < visible; j++) {
    s[j] = exp_approx(s[j] - shift);
    sum += s[j];
  }
  std::fill(s + visible, s + cols, 0.0f);
  return sum;
}

// Where the rows of one query head h and its kv head h / (NH / NKV) start in a token's qkv row:
// [q (NH heads) | k (NKV heads) | v (NKV heads)], each HS channels. For NKV == NH, k = q + C, v = q + 2C.
struct HeadOffsets {
  int64_t q, k, v;
};

HeadOffsets head_offsets(int64_t h, int64_t HS, int64_t NH, int64_t NKV) {
  const int64_t g = h / (NH / NKV);
  return {h * HS, NH * HS + g * HS, (NH + NKV) * HS + g * HS};
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV) {
  const int64_t HS = C / NH, W = (NH + 2 * NKV) * HS;
  const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel if (B * T * T * C >= kMinParallelElements)  // work ~ B T^2 C
  {
    std::vector<float> p(size_t(std::min(kTile, T) * T));  // (kTile, T)
    std::vector<float> row_sum(static_cast<size_t>(kTile));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t h = 0; h < NH; h++) {
        const HeadOffsets at = head_offsets(h, HS, NH, NKV);
        const float* q = qkv + b * T * W + at.q;   // (T, HS), row stride W
        const float* k = qkv + b * T * W + at.k;   // (T, HS), row stride W; kv head h / (NH / NKV)
        const float* v = qkv + b * T * W + at.v;   // (T, HS), row stride W
        float* out_bh = out + b * T * C + h * HS;  // (T, HS), row stride C
        float* lse_bh = lse + (b * NH + h) * T;    // (T)
        for (int64_t r0 = 0; r0 < T; r0 += kTile) {
          const int64_t rows = std::min(kTile, T - r0), cols = r0 + rows;
          tile_scores(p.data(), q + r0 * W, k, rows, cols, HS, W, scale);
          for (int64_t i = 0; i < rows; i++) {  // softmax numerators, keys 0..r0+i
            float* p_i = p.data() + i * cols;
            float max_s = -INFINITY;
#pragma omp simd reduction(max : max_s)
            for (int64_t j = 0; j <= r0 + i; j++) max_s = std::max(max_s, p_i[j]);
            row_sum[size_t(i)] = masked_exp_row(p_i, r0 + i + 1, cols, max_s);
            lse_bh[r0 + i] = max_s + std::log(row_sum[size_t(i)]);
          }
          // out tile (rows, HS) = p (rows, cols) * v (cols, HS), then each row divided by its sum
          float* out_tile = out_bh + r0 * C;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(HS), int(cols), 1.0f, p.data(),
                      int(cols), v, int(W), 0.0f, out_tile, int(C));
          for (int64_t i = 0; i < rows; i++) {
            const float inv = 1.0f / row_sum[size_t(i)];
#pragma omp simd
            for (int64_t d = 0; d < HS; d++) out_tile[i * C + d] *= inv;
          }
        }
      }
    }
  }
}

namespace {

// One query head's backward. q, k, v, dq, dk, dv: (T, HS), row stride W; dout_bh, out_bh: (T, HS),
// row stride C; lse_bh (T). dq is written; dk and dv are accumulated (+=), so a kv head shared by
// several query heads sums their contributions. p and dp: (kTile, T) scratch.
struct HeadBackward {
  const float *q, *k, *v, *dout_bh, *out_bh, *lse_bh;
  float *dq, *dk, *dv;
};

void attention_backward_head(const HeadBackward& a, int64_t T, int64_t HS, int64_t W, int64_t C, float scale,
                             float* p, float* dp) {
  for (int64_t r0 = 0; r0 < T; r0 += kTile) {
    const int64_t rows = std::min(kTile, T - r0), cols = r0 + rows;
    const float* dout_tile = a.dout_bh + r0 * C;  // (rows, HS)
    tile_scores(p, a.q + r0 * W, a.k, rows, cols, HS, W, scale);
    for (int64_t i = 0; i < rows; i++) masked_exp_row(p + i * cols, r0 + i + 1, cols, a.lse_bh[r0 + i]);
    // dv (cols, HS) += p^T (cols, rows) * dout_tile (rows, HS)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(cols), int(HS), int(rows), 1.0f, p, int(cols),
                dout_tile, int(C), 1.0f, a.dv, int(W));
    // dp (rows, cols) = dout_tile (rows, HS) * v (cols, HS)^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(cols), int(HS), 1.0f, dout_tile, int(C),
                a.v, int(W), 0.0f, dp, int(cols));
    // dS = p * (dp - rowsum(dout * out)), written over p
    for (int64_t i = 0; i < rows; i++) {
      const float* do_i = dout_tile + i * C;
      const float* o_i = a.out_bh + (r0 + i) * C;
      float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
      for (int64_t d = 0; d < HS; d++) delta += do_i[d] * o_i[d];
      float* p_i = p + i * cols;
      const float* dp_i = dp + i * cols;
#pragma omp simd
      for (int64_t j = 0; j < cols; j++) p_i[j] *= dp_i[j] - delta;
    }
    // dq tile (rows, HS) = scale * dS (rows, cols) * k (cols, HS)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(HS), int(cols), scale, p, int(cols), a.k,
                int(W), 0.0f, a.dq + r0 * W, int(W));
    // dk (cols, HS) += scale * dS^T (cols, rows) * q tile (rows, HS)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(cols), int(HS), int(rows), scale, p, int(cols),
                a.q + r0 * W, int(W), 1.0f, a.dk, int(W));
  }
}

}  // namespace

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV) {
  const int64_t HS = C / NH, W = (NH + 2 * NKV) * HS, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel if (B * T * T * C >= kMinParallelElements)  // work ~ B T^2 C
  {
    std::vector<float> p(size_t(std::min(kTile, T) * T));   // (kTile, T): probabilities, then dS
    std::vector<float> dp(size_t(std::min(kTile, T) * T));  // (kTile, T)
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t g = 0; g < NKV; g++) {
        const float* x = qkv + b * T * W;  // (T, W)
        float* dx = dqkv + b * T * W;      // (T, W)
        // dk and dv gather from every tile of every query head of the group, so they start at zero;
        // the heads then add in order h = g*group, ..., so the sums do not depend on the thread count.
        const HeadOffsets kv = head_offsets(g * group, HS, NH, NKV);
        for (int64_t t = 0; t < T; t++) {
          std::fill(dx + t * W + kv.k, dx + t * W + kv.k + HS, 0.0f);
          std::fill(dx + t * W + kv.v, dx + t * W + kv.v + HS, 0.0f);
        }
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          const HeadOffsets at = head_offsets(h, HS, NH, NKV);
          const HeadBackward head{.q = x + at.q,
                                  .k = x + at.k,
                                  .v = x + at.v,
                                  .dout_bh = dout + b * T * C + h * HS,
                                  .out_bh = out + b * T * C + h * HS,
                                  .lse_bh = lse + (b * NH + h) * T,
                                  .dq = dx + at.q,
                                  .dk = dx + at.k,
                                  .dv = dx + at.v};
          attention_backward_head(head, T, HS, W, C, scale, p.data(), dp.data());
        }
      }
    }
  }
}

}  // namespace tessera::cpu
