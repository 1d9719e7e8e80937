// The inner step shared by the CPU attention kernels (attention_cpu, attention_block_cpu): one tile of
// query rows of one head against the keys [0, cols) of its kv head, row i of the tile seeing keys
// [first[i], visible[i]) of them (first null: from 0; visible[i] <= cols), its scores soft-capped when
// softcap > 0 (s -> softcap tanh(s / softcap), before the softmax, as Gemma 2's). Forward: the tile's
// softmax-weighted values and row log-sum-exp (a row that sees no key: 0 and -inf). Backward: from
// the final lse and D = rowsum(dout * out), dk and dv accumulate (+=) and dq is written (dq_beta 0)
// or accumulated (dq_beta 1). Scores stay in a (kTile, cols) scratch; the GEMMs read q, k, v in place
// at their row strides and run on the calling thread.
#pragma once

#include <cstdint>

namespace tessera::cpu {

constexpr int64_t kAttentionTile = 64;  // query rows per tile

// Where query head h and its kv head h / (NH / NKV) start in a token's qkv row [q (NH heads) | k (NKV
// heads) | v (NKV heads)], each HS channels. For NKV == NH, k = q + C, v = q + 2C.
struct HeadOffsets {
  int64_t q, k, v;
};
HeadOffsets head_offsets(int64_t h, int64_t HS, int64_t NH, int64_t NKV);

struct AttentionTile {
  const float* q;  // (rows, HS), row stride ldq
  int64_t ldq;
  const float *k, *v;  // (cols, HS), row stride ldkv
  int64_t ldkv;
  int64_t rows, cols, HS;
  float scale;              // 1 / sqrt(HS)
  float softcap = 0.0f;     // > 0: the scaled scores capped at +-softcap by softcap tanh(s / softcap); 0: not
  const int64_t* visible;   // (rows) end of the keys seen by each row
  const int64_t* first = nullptr;  // (rows) first key seen by each row (document masks), or null: 0
  int64_t first_key(int64_t row) const { return first ? first[row] : 0; }
};

// A tile cut from a head's keys: its k and v start at key k0 of the head's, so the key gradients it
// writes start there too.
struct PlacedTile {
  AttentionTile tile;
  int64_t k0;
};

// o (rows, HS), row stride ldo = softmax(cap(scale q k^T) over each row's visible keys) v; lse (rows).
// p: (kAttentionTile, cols) scratch.
void attention_tile_forward(const AttentionTile& t, float* o, int64_t ldo, float* lse, float* p);

struct AttentionTileGrads {
  const float* dout;  // (rows, HS), row stride ldo
  int64_t ldo;
  const float *lse, *delta;  // (rows): the final log-sum-exp and D = rowsum(dout * out) of each row
  float* dq;                 // (rows, HS), row stride ldq: dq = dq_beta * dq + scale dS k
  float dq_beta;
  float *dk, *dv;  // (cols, HS), row stride ldkv: += scale dS^T q and += p^T dout
};

// p, dp: (kAttentionTile, cols) scratch.
void attention_tile_backward(const AttentionTile& t, const AttentionTileGrads& g, float* p, float* dp);

// D of one row: sum over the HS channels of dout * out.
float attention_row_delta(const float* dout, const float* out, int64_t HS);

}  // namespace tessera::cpu
