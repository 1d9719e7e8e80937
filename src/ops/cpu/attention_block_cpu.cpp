// Attention blocks on the CPU. Query row i sees the kv block's first visible[i] keys (positions are
// increasing, so the visible keys are a prefix and visible[] does not decrease); rows that see none are
// skipped, and a tile of query rows stops at the keys its last row sees, so fully masked (row, key)
// work is never done. Forward threads take (b, query head) pairs, compute a tile into scratch
// (ops/cpu/attention_tile.h) and merge it into out and lse; backward threads take (b, kv head) pairs
// and walk the group's query heads in order, so the sums do not depend on the thread count.
#include "ops/cpu/attention_block_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/attention_tile.h"
#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

// How many keys of the block each query row sees.
std::vector<int64_t> visible_keys(const AttentionBlock& a) {
  std::vector<int64_t> visible(size_t(a.Tq));
  for (int64_t i = 0; i < a.Tq; i++)
    visible[size_t(i)] = std::upper_bound(a.kv_pos, a.kv_pos + a.Tk, a.q_pos[i]) - a.kv_pos;
  return visible;
}

// The first query row that sees a key (Tq when none does).
int64_t first_seeing_row(const std::vector<int64_t>& visible) {
  return std::upper_bound(visible.begin(), visible.end(), int64_t(0)) - visible.begin();
}

// The tile of query rows [r0, r0 + rows) of one head over the keys its last row sees. q: (Tq, HS), row
// stride W; k, v: (Tk, HS), row stride 2*NKV*HS.
AttentionTile block_tile(const float* q, const float* k, const float* v, const AttentionBlock& a,
                         const std::vector<int64_t>& visible, int64_t r0) {
  const int64_t rows = std::min(kAttentionTile, a.Tq - r0);
  return {.q = q + r0 * (a.NH + 2 * a.NKV) * a.HS, .ldq = (a.NH + 2 * a.NKV) * a.HS, .k = k, .v = v,
          .ldkv = 2 * a.NKV * a.HS, .rows = rows, .cols = visible[size_t(r0 + rows - 1)], .HS = a.HS,
          .scale = 1.0f / std::sqrt(float(a.HS)), .visible = visible.data() + r0};
}

// Where query head h starts in a qkv row, and its kv head's k and v in a [k | v] row.
HeadOffsets block_head_offsets(int64_t h, const AttentionBlock& a) {
  const HeadOffsets at = head_offsets(h, a.HS, a.NH, a.NKV);
  return {at.q, at.k - a.NH * a.HS, at.v - a.NH * a.HS};
}

// Online softmax: the running row (out, lse) absorbs a block's row (o, lse_blk).
void merge_row(float* out, float* lse, const float* o, float lse_blk, int64_t HS) {
  const float shift = std::max(*lse, lse_blk);
  const float merged = shift + std::log(std::exp(*lse - shift) + std::exp(lse_blk - shift));
  const float keep = std::exp(*lse - merged), take = std::exp(lse_blk - merged);
#pragma omp simd
  for (int64_t d = 0; d < HS; d++) out[d] = keep * out[d] + take * o[d];
  *lse = merged;
}

}  // namespace

void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, const AttentionBlock& a,
                             bool first) {
  const int64_t C = a.NH * a.HS, W = (a.NH + 2 * a.NKV) * a.HS, KV = 2 * a.NKV * a.HS;
  const std::vector<int64_t> visible = visible_keys(a);
  const int64_t start = first_seeing_row(visible);
#pragma omp parallel if (a.B * a.Tq * a.Tk * C >= kMinParallelElements)  // work ~ B Tq Tk C
  {
    std::vector<float> p(size_t(kAttentionTile * a.Tk));  // (kAttentionTile, Tk)
    std::vector<float> o(size_t(kAttentionTile * a.HS));  // (kAttentionTile, HS): the tile's block result
    float lse_blk[kAttentionTile];
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < a.B; b++) {
      for (int64_t h = 0; h < a.NH; h++) {
        const HeadOffsets at = block_head_offsets(h, a);
        const float* kv_b = kv + b * a.Tk * KV;
        float* out_bh = out + b * a.Tq * C + h * a.HS;  // (Tq, HS), row stride C
        float* lse_bh = lse + (b * a.NH + h) * a.Tq;    // (Tq)
        if (first)
          for (int64_t t = 0; t < a.Tq; t++) {
            std::fill(out_bh + t * C, out_bh + t * C + a.HS, 0.0f);
            lse_bh[t] = -INFINITY;
          }
        for (int64_t r0 = start; r0 < a.Tq; r0 += kAttentionTile) {
          const AttentionTile tile = block_tile(qkv + b * a.Tq * W + at.q, kv_b + at.k, kv_b + at.v, a, visible, r0);
          attention_tile_forward(tile, o.data(), a.HS, lse_blk, p.data());
          for (int64_t i = 0; i < tile.rows; i++)
            merge_row(out_bh + (r0 + i) * C, lse_bh + r0 + i, o.data() + i * a.HS, lse_blk[i], a.HS);
        }
      }
    }
  }
}

void attention_block_delta(float* delta, const float* dout, const float* out, int64_t B, int64_t T, int64_t NH,
                           int64_t HS) {
  const int64_t C = NH * HS;
#pragma omp parallel for collapse(2) schedule(static) if (B * T * C >= kMinParallelElements)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const int64_t at = (b * T + t) * C + h * HS;
        delta[(b * NH + h) * T + t] = attention_row_delta(dout + at, out + at, HS);
      }
}

void attention_block_backward(float* dqkv, float* dkv, const float* dout, const float* qkv, const float* kv,
                              const float* lse, const float* delta, const AttentionBlock& a) {
  const int64_t C = a.NH * a.HS, W = (a.NH + 2 * a.NKV) * a.HS, KV = 2 * a.NKV * a.HS, group = a.NH / a.NKV;
  const std::vector<int64_t> visible = visible_keys(a);
  const int64_t start = first_seeing_row(visible);
#pragma omp parallel if (a.B * a.Tq * a.Tk * C >= kMinParallelElements)  // work ~ B Tq Tk C
  {
    std::vector<float> p(size_t(kAttentionTile * a.Tk));   // (kAttentionTile, Tk): probabilities, then dS
    std::vector<float> dp(size_t(kAttentionTile * a.Tk));  // (kAttentionTile, Tk)
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < a.B; b++) {
      for (int64_t g = 0; g < a.NKV; g++) {
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          const HeadOffsets at = block_head_offsets(h, a);
          const int64_t kv_at = b * a.Tk * KV, q_at = b * a.Tq * W + at.q;
          const int64_t bh = (b * a.NH + h) * a.Tq, dout_at = b * a.Tq * C + h * a.HS;
          for (int64_t r0 = start; r0 < a.Tq; r0 += kAttentionTile) {
            const AttentionTile tile = block_tile(qkv + q_at, kv + kv_at + at.k, kv + kv_at + at.v, a, visible, r0);
            const AttentionTileGrads grads{.dout = dout + dout_at + r0 * C, .ldo = C, .lse = lse + bh + r0,
                                           .delta = delta + bh + r0, .dq = dqkv + q_at + r0 * W, .dq_beta = 1.0f,
                                           .dk = dkv + kv_at + at.k, .dv = dkv + kv_at + at.v};
            attention_tile_backward(tile, grads, p.data(), dp.data());
          }
        }
      }
    }
  }
}

}  // namespace tessera::cpu
