// Causal attention on the CPU, flash style. Forward threads take (b, query head) pairs, backward
// threads (b, kv head) pairs and walk the query heads of the group in order, so dk and dv of a shared
// kv head accumulate on one thread in a fixed order. Each head walks the queries in tiles of
// kAttentionTile rows (ops/cpu/attention_tile.h), and a tile of rows [r0, r1) only sees keys [0, r1)
// (with document masks [start of row r0's document, r1)), so the GEMMs skip the masked upper triangle
// (and earlier documents) except inside the tile's own block. Scores live in one
// (kAttentionTile, T) scratch per thread. Backward recomputes each tile's probabilities from the saved
// log-sum-exp.
#include "ops/cpu/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/attention_tile.h"
#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

// The causal tile of rows [r0, r0 + rows) of one head: keys [0, r0 + rows), row i seeing r0 + i + 1;
// with document starts (T) only the keys from the tile's first row's start on, row i seeing those from
// its own start (starts do not decrease). q, k, v: (T, HS), row stride W; visible, first:
// (kAttentionTile) filled here.
PlacedTile causal_tile(const float* q, const float* k, const float* v, int64_t W, int64_t r0, int64_t T, int64_t HS,
                       float softcap, const int32_t* doc_starts, int64_t* visible, int64_t* first) {
  const int64_t rows = std::min(kAttentionTile, T - r0), k0 = doc_starts ? doc_starts[r0] : 0;
  for (int64_t i = 0; i < rows; i++) {
    visible[i] = r0 + i + 1 - k0;
    first[i] = doc_starts ? doc_starts[r0 + i] - k0 : 0;
  }
  return {{.q = q + r0 * W, .ldq = W, .k = k + k0 * W, .v = v + k0 * W, .ldkv = W, .rows = rows,
           .cols = r0 + rows - k0, .HS = HS, .scale = 1.0f / std::sqrt(float(HS)), .softcap = softcap,
           .visible = visible, .first = first},
          k0};
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV, const int32_t* doc_starts, float softcap) {
  const int64_t HS = C / NH, W = (NH + 2 * NKV) * HS;
#pragma omp parallel if (B * T * T * C >= kMinParallelElements)  // work ~ B T^2 C
  {
    std::vector<float> p(size_t(std::min(kAttentionTile, T) * T));  // (kAttentionTile, T)
    int64_t visible[kAttentionTile], first[kAttentionTile];
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t h = 0; h < NH; h++) {
        const HeadOffsets at = head_offsets(h, HS, NH, NKV);
        const float* x = qkv + b * T * W;          // (T, W)
        float* out_bh = out + b * T * C + h * HS;  // (T, HS), row stride C
        float* lse_bh = lse + (b * NH + h) * T;    // (T)
        const int32_t* starts = doc_starts ? doc_starts + b * T : nullptr;
        for (int64_t r0 = 0; r0 < T; r0 += kAttentionTile) {
          const PlacedTile ct = causal_tile(x + at.q, x + at.k, x + at.v, W, r0, T, HS, softcap, starts, visible, first);
          attention_tile_forward(ct.tile, out_bh + r0 * C, C, lse_bh + r0, p.data());
        }
      }
    }
  }
}

namespace {

// One query head's backward: q, k, v, dq, dk, dv (T, HS), row stride W; dout_bh, out_bh (T, HS), row
// stride C; lse_bh (T); doc_starts (T) or null. dq is written; dk and dv are accumulated (+=), so a
// kv head shared by several query heads sums their contributions. p and dp: (kAttentionTile, T) scratch.
struct HeadBackward {
  const float *q, *k, *v, *dout_bh, *out_bh, *lse_bh;
  float *dq, *dk, *dv;
  const int32_t* doc_starts;
};

void attention_backward_head(const HeadBackward& a, int64_t T, int64_t HS, int64_t W, int64_t C, float softcap,
                             float* p, float* dp) {
  int64_t visible[kAttentionTile], first[kAttentionTile];
  float delta[kAttentionTile];
  for (int64_t r0 = 0; r0 < T; r0 += kAttentionTile) {
    const PlacedTile ct = causal_tile(a.q, a.k, a.v, W, r0, T, HS, softcap, a.doc_starts, visible, first);
    for (int64_t i = 0; i < ct.tile.rows; i++)
      delta[i] = attention_row_delta(a.dout_bh + (r0 + i) * C, a.out_bh + (r0 + i) * C, HS);
    const AttentionTileGrads grads{.dout = a.dout_bh + r0 * C, .ldo = C, .lse = a.lse_bh + r0, .delta = delta,
                                   .dq = a.dq + r0 * W, .dq_beta = 0.0f, .dk = a.dk + ct.k0 * W,
                                   .dv = a.dv + ct.k0 * W};
    attention_tile_backward(ct.tile, grads, p, dp);
  }
}

}  // namespace

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, const int32_t* doc_starts,
                        float softcap) {
  const int64_t HS = C / NH, W = (NH + 2 * NKV) * HS, group = NH / NKV;
#pragma omp parallel if (B * T * T * C >= kMinParallelElements)  // work ~ B T^2 C
  {
    std::vector<float> p(size_t(std::min(kAttentionTile, T) * T));   // (kAttentionTile, T): probabilities, then dS
    std::vector<float> dp(size_t(std::min(kAttentionTile, T) * T));  // (kAttentionTile, T)
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
                                  .dv = dx + at.v,
                                  .doc_starts = doc_starts ? doc_starts + b * T : nullptr};
          attention_backward_head(head, T, HS, W, C, softcap, p.data(), dp.data());
        }
      }
    }
  }
}

}  // namespace tessera::cpu
