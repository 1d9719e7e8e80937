// Causal attention on the CPU, flash style. Threads take (b, head) pairs; each walks the queries in
// tiles of kTile rows, and a tile of rows [r0, r1) only sees keys [0, r1), so the GEMMs skip the
// masked upper triangle except inside the diagonal block. Scores live in one (kTile, T) scratch per
// thread; the GEMMs read q, k, v in place (row stride 3C) and, inside the OpenMP region, run on the
// calling thread. Backward recomputes each tile's probabilities from the saved log-sum-exp.
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

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t HS = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel if (B * T * T * C >= kMinParallelElements)  // work ~ B T^2 C
  {
    std::vector<float> p(size_t(std::min(kTile, T) * T));  // (kTile, T)
    std::vector<float> row_sum(static_cast<size_t>(kTile));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t h = 0; h < NH; h++) {
        const float* q = qkv + b * T * C3 + h * HS;  // (T, HS), row stride 3C
        const float* k = q + C;                      // (T, HS), row stride 3C
        const float* v = q + 2 * C;                  // (T, HS), row stride 3C
        float* out_bh = out + b * T * C + h * HS;    // (T, HS), row stride C
        float* lse_bh = lse + (b * NH + h) * T;      // (T)
        for (int64_t r0 = 0; r0 < T; r0 += kTile) {
          const int64_t rows = std::min(kTile, T - r0), cols = r0 + rows;
          tile_scores(p.data(), q + r0 * C3, k, rows, cols, HS, C3, scale);
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
                      int(cols), v, int(C3), 0.0f, out_tile, int(C));
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

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t HS = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel if (B * T * T * C >= kMinParallelElements)  // work ~ B T^2 C
  {
    std::vector<float> p(size_t(std::min(kTile, T) * T));   // (kTile, T): probabilities, then dS
    std::vector<float> dp(size_t(std::min(kTile, T) * T));  // (kTile, T)
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t h = 0; h < NH; h++) {
        const float* q = qkv + b * T * C3 + h * HS;  // (T, HS), row stride 3C; k, v follow at +C, +2C
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* dq = dqkv + b * T * C3 + h * HS;  // (T, HS), row stride 3C; dk, dv follow at +C, +2C
        float* dk = dq + C;
        float* dv = dq + 2 * C;
        const float* dout_bh = dout + b * T * C + h * HS;  // (T, HS), row stride C
        const float* out_bh = out + b * T * C + h * HS;    // (T, HS), row stride C
        const float* lse_bh = lse + (b * NH + h) * T;      // (T)
        // dk and dv gather from every later tile, so they start at zero; dq is written tile by tile.
        for (int64_t t = 0; t < T; t++) {
          std::fill(dk + t * C3, dk + t * C3 + HS, 0.0f);
          std::fill(dv + t * C3, dv + t * C3 + HS, 0.0f);
        }
        for (int64_t r0 = 0; r0 < T; r0 += kTile) {
          const int64_t rows = std::min(kTile, T - r0), cols = r0 + rows;
          const float* dout_tile = dout_bh + r0 * C;  // (rows, HS)
          tile_scores(p.data(), q + r0 * C3, k, rows, cols, HS, C3, scale);
          for (int64_t i = 0; i < rows; i++) masked_exp_row(p.data() + i * cols, r0 + i + 1, cols, lse_bh[r0 + i]);
          // dv (cols, HS) += p^T (cols, rows) * dout_tile (rows, HS)
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(cols), int(HS), int(rows), 1.0f, p.data(),
                      int(cols), dout_tile, int(C), 1.0f, dv, int(C3));
          // dp (rows, cols) = dout_tile (rows, HS) * v (cols, HS)^T
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(cols), int(HS), 1.0f, dout_tile,
                      int(C), v, int(C3), 0.0f, dp.data(), int(cols));
          // dS = p * (dp - rowsum(dout * out)), written over p
          for (int64_t i = 0; i < rows; i++) {
            const float* do_i = dout_tile + i * C;
            const float* o_i = out_bh + (r0 + i) * C;
            float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
            for (int64_t d = 0; d < HS; d++) delta += do_i[d] * o_i[d];
            float* p_i = p.data() + i * cols;
            const float* dp_i = dp.data() + i * cols;
#pragma omp simd
            for (int64_t j = 0; j < cols; j++) p_i[j] *= dp_i[j] - delta;
          }
          // dq tile (rows, HS) = scale * dS (rows, cols) * k (cols, HS)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(HS), int(cols), scale, p.data(),
                      int(cols), k, int(C3), 0.0f, dq + r0 * C3, int(C3));
          // dk (cols, HS) += scale * dS^T (cols, rows) * q tile (rows, HS)
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(cols), int(HS), int(rows), scale, p.data(),
                      int(cols), q + r0 * C3, int(C3), 1.0f, dk, int(C3));
        }
      }
    }
  }
}

}  // namespace tessera::cpu
