// Attention blocks on the CPU. Query row i sees the kv block's first visible[i] keys (positions are
// increasing, so the visible keys are a prefix and visible[] does not decrease), or under document
// masks those from first[i] on (which does not decrease either); rows that see none are skipped, and a
// tile of query rows spans the keys from its first row's first to its last row's end, so fully masked
// (tile, key) work is never done. Forward threads take (b, query head) pairs, compute a tile into scratch
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

// The keys of the block each query row sees: [first, visible), first (B,Tq) from the rows' document
// starts (empty without them: every row sees from key 0), visible (Tq) the same for every sequence.
struct VisibleKeys {
  std::vector<int64_t> first, visible;
};

VisibleKeys visible_keys(const AttentionBlock& a) {
  VisibleKeys keys{.first = {}, .visible = std::vector<int64_t>(size_t(a.Tq))};
  for (int64_t i = 0; i < a.Tq; i++)
    keys.visible[size_t(i)] = std::upper_bound(a.kv_pos, a.kv_pos + a.Tk, a.q_pos[i]) - a.kv_pos;
  if (!a.q_doc_starts) return keys;
  keys.first.resize(size_t(a.B * a.Tq));
  for (int64_t r = 0; r < a.B * a.Tq; r++)
    keys.first[size_t(r)] = std::lower_bound(a.kv_pos, a.kv_pos + a.Tk, a.q_doc_starts[r]) - a.kv_pos;
  return keys;
}

// The first query row that sees a key (Tq when none does).
int64_t first_seeing_row(const std::vector<int64_t>& visible) {
  return std::upper_bound(visible.begin(), visible.end(), int64_t(0)) - visible.begin();
}

// The tile of query rows [r0, r0 + rows) of sequence b of one head, over the keys from its first row's
// first to its last row's end (cols <= 0: the tile sees none). q: (Tq, HS), row stride W; k, v: (Tk, HS),
// row stride 2*NKV*HS; first, visible: (kAttentionTile) scratch, filled relative to the tile's keys.
PlacedTile block_tile(const float* q, const float* k, const float* v, const AttentionBlock& a,
                      const VisibleKeys& keys, int64_t b, int64_t r0, int64_t* first, int64_t* visible) {
  const int64_t rows = std::min(kAttentionTile, a.Tq - r0);
  const int64_t* row_first = keys.first.empty() ? nullptr : keys.first.data() + b * a.Tq + r0;
  const int64_t k0 = row_first ? row_first[0] : 0, KV = 2 * a.NKV * a.HS;
  for (int64_t i = 0; i < rows; i++) {
    first[i] = row_first ? row_first[i] - k0 : 0;
    visible[i] = std::max(keys.visible[size_t(r0 + i)] - k0, first[i]);
  }
  return {{.q = q + r0 * (a.NH + 2 * a.NKV) * a.HS, .ldq = (a.NH + 2 * a.NKV) * a.HS, .k = k + k0 * KV,
           .v = v + k0 * KV, .ldkv = KV, .rows = rows, .cols = keys.visible[size_t(r0 + rows - 1)] - k0, .HS = a.HS,
           .scale = 1.0f / std::sqrt(float(a.HS)), .softcap = a.softcap, .visible = visible, .first = first},
          k0};
}

// Where query head h starts in a qkv row, and its kv head's k and v in a [k | v] row.
HeadOffsets block_head_offsets(int64_t h, const AttentionBlock& a) {
  const HeadOffsets at = head_offsets(h, a.HS, a.NH, a.NKV);
  return {at.q, at.k - a.NH * a.HS, at.v - a.NH * a.HS};
}

// Online softmax: the running row (out, lse) absorbs a block's row (o, lse_blk); a row that saw no key
// of the block (lse_blk -inf) keeps its values.
void merge_row(float* out, float* lse, const float* o, float lse_blk, int64_t HS) {
  if (lse_blk == -INFINITY) return;
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
  const VisibleKeys keys = visible_keys(a);
  const int64_t start = first_seeing_row(keys.visible);
#pragma omp parallel if (a.B * a.Tq * a.Tk * C >= kMinParallelElements)  // work ~ B Tq Tk C
  {
    std::vector<float> p(size_t(kAttentionTile * a.Tk));  // (kAttentionTile, Tk)
    std::vector<float> o(size_t(kAttentionTile * a.HS));  // (kAttentionTile, HS): the tile's block result
    float lse_blk[kAttentionTile];
    int64_t tile_first[kAttentionTile], tile_visible[kAttentionTile];
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
          const AttentionTile tile =
              block_tile(qkv + b * a.Tq * W + at.q, kv_b + at.k, kv_b + at.v, a, keys, b, r0, tile_first,
                         tile_visible).tile;
          if (tile.cols <= 0) continue;
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
  const VisibleKeys keys = visible_keys(a);
  const int64_t start = first_seeing_row(keys.visible);
#pragma omp parallel if (a.B * a.Tq * a.Tk * C >= kMinParallelElements)  // work ~ B Tq Tk C
  {
    std::vector<float> p(size_t(kAttentionTile * a.Tk));   // (kAttentionTile, Tk): probabilities, then dS
    std::vector<float> dp(size_t(kAttentionTile * a.Tk));  // (kAttentionTile, Tk)
    int64_t tile_first[kAttentionTile], tile_visible[kAttentionTile];
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < a.B; b++) {
      for (int64_t g = 0; g < a.NKV; g++) {
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          const HeadOffsets at = block_head_offsets(h, a);
          const int64_t kv_at = b * a.Tk * KV, q_at = b * a.Tq * W + at.q;
          const int64_t bh = (b * a.NH + h) * a.Tq, dout_at = b * a.Tq * C + h * a.HS;
          for (int64_t r0 = start; r0 < a.Tq; r0 += kAttentionTile) {
            const PlacedTile bt =
                block_tile(qkv + q_at, kv + kv_at + at.k, kv + kv_at + at.v, a, keys, b, r0, tile_first, tile_visible);
            if (bt.tile.cols <= 0) continue;
            const int64_t k_at = kv_at + bt.k0 * KV;
            const AttentionTileGrads grads{.dout = dout + dout_at + r0 * C, .ldo = C, .lse = lse + bh + r0,
                                           .delta = delta + bh + r0, .dq = dqkv + q_at + r0 * W, .dq_beta = 1.0f,
                                           .dk = dkv + k_at + at.k, .dv = dkv + k_at + at.v};
            attention_tile_backward(bt.tile, grads, p.data(), dp.data());
          }
        }
      }
    }
  }
}

}  // namespace tessera::cpu
