// Causal self-attention on the GPU, FlashAttention-2 style (contract in ops/attention.h); storage Elem =
// float, bf16 or fp16 for qkv, out, dout, dqkv (lse and delta always fp32), math in fp32: tiles are widened
// to fp32 as they enter shared memory, results rounded once as they leave. Blocks of 128 threads take
// one (64-row tile, head, batch); q, k, v, dout tiles sit in shared memory, score tiles in registers,
// and no (T,T) matrix reaches global memory. Grouped-query attention (NKV kv heads shared by NH / NKV
// query heads each) reads a query head's kv head; its dk, dv sum over the group's query heads in order.
// Forward: online softmax over the key tiles at or below the diagonal, then out and lse = ln sum_j
// exp(s_ij). Backward, deterministic (no atomics): delta = rowsum(dout * out), one kernel per key tile for
// dk, dv, one per query tile for dq, P from lse. Document masks (doc_starts non-null) hide the keys before
// a row's document start like the causal mask hides those after it, and skip the tiles no row sees.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/device.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

// Thread layout. A block's 128 threads form a 16 x 8 grid, ty = tid / 8, tx = tid % 8. In a
// (kTile, kTile) score tile thread (ty, tx) owns rows ty + 16 i (i < 4) and columns tx + 8 j (j < 8):
// a row's 8 owners are 8 neighbouring lanes of one warp, so row reductions are 3 shuffles. In a
// (kTile, HS) accumulator it owns the same rows and the kVec-wide column groups tx kVec + 8 kVec g.
constexpr int kTile = 64;
constexpr int kThreads = 128;
constexpr int kGridX = 8;                  // tx
constexpr int kGridY = kThreads / kGridX;  // ty
constexpr int kRows = kTile / kGridY;      // rows per thread: 4
constexpr int kCols = kTile / kGridX;      // score columns per thread: 8
constexpr int kLdScores = kTile + 8;       // row stride of a shared score tile: conflict-free stores
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;
constexpr const char* kHeadSizes = "16, 32, 48, 64, 80, 96, 128";

// A (kTile, HS) tile of q, k, v or dout in shared memory, and a thread's share of a (kTile, HS)
// accumulator.
template <int HS>
struct HeadTile {
  static_assert(HS % 16 == 0 && HS <= 128, "head sizes are multiples of 16 up to 128");
  static constexpr int kLd = HS + 4;  // padded row stride: float4 reads of 8 rows hit distinct banks
  static constexpr int kFloats = kTile * kLd;
  static constexpr int kVec = HS % 32 == 0 ? 4 : 2;         // width of a thread's column groups
  static constexpr int kGroups = HS / (kGridX * kVec);      // column groups per thread
  static constexpr int kAcc = HS / kGridX;                  // accumulator columns per thread
};

// --- fp32 -> storage type ---

// p[0..N) = v rounded to Elem in one store of N sizeof(Elem) = 4, 8 or 16 bytes, p aligned to that
// size. (vector_io.cuh's store_f32_vec moves 16 bytes; a thread's accumulator column group is
// kVec = 2 or 4 elements.)
template <int N, typename Elem>
__device__ __forceinline__ void store_group(Elem* p, const float (&v)[N]) {
  constexpr int kBytes = N * int(sizeof(Elem));
  if constexpr (kBytes == 16) {
    store_f32_vec(p, v);
  } else {
    static_assert(kBytes == 8 || kBytes == 4, "a column group is 4, 8 or 16 bytes");
    using Word = std::conditional_t<kBytes == 8, uint2, uint32_t>;
    Elem packed[N];
#pragma unroll
    for (int k = 0; k < N; k++) packed[k] = store_as<Elem>(v[k]);
    Word bits;
    memcpy(&bits, packed, sizeof(bits));
    *reinterpret_cast<Word*>(p) = bits;
  }
}

__device__ __forceinline__ float component(const float4& v, int c) {
  return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}

// Max and sum over the 8 lanes that own one score row.
__device__ __forceinline__ float row_max(float v) {
  for (int offset = kGridX / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
  for (int offset = kGridX / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// --- tile building blocks ---

// dst (kTile, HS) in fp32, row stride kLd, = rows [row0, row0 + kTile) of src (T, HS), row stride
// ld; rows at or past T are zeros. One 16-byte global load (4 floats or 8 bf16/fp16) per step.
template <int HS, typename Elem>
__device__ __forceinline__ void load_tile(float* dst, const Elem* src, int64_t ld, int row0, int T) {
  constexpr int kW = kVec<Elem>, kLoads = HS / kW, kPerThread = kTile * kLoads / kThreads;
  static_assert(HS % kW == 0 && kTile * kLoads % kThreads == 0);
#pragma unroll 4  // 4 loads in flight per thread: all HS/8 fp32 loads at once hold HS/2 registers, spill at HS 128
  for (int n = 0; n < kPerThread; n++) {
    const int idx = n * kThreads + int(threadIdx.x);
    const int r = idx / kLoads, c = idx % kLoads * kW;
    float v[kW] = {};
    if (row0 + r < T) load_f32_vec(v, src + (row0 + r) * ld + c);
#pragma unroll
    for (int k = 0; k < kW; k += 4)
      *reinterpret_cast<float4*>(dst + r * HeadTile<HS>::kLd + c + k) =
          make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
  }
}

// s[i][j] = a[ty + 16 i] . b[tx + 8 j]: dot products of the rows of two shared (kTile, HS) tiles.
template <int HS>
__device__ __forceinline__ void tile_scores(float (&s)[kRows][kCols], const float* a, const float* b) {
  constexpr int kLd = HeadTile<HS>::kLd;
  const int ty = int(threadIdx.x) / kGridX, tx = int(threadIdx.x) % kGridX;
#pragma unroll
  for (int i = 0; i < kRows; i++)
#pragma unroll
    for (int j = 0; j < kCols; j++) s[i][j] = 0.0f;
#pragma unroll 2
  for (int d = 0; d < HS; d += 4) {
    float4 av[kRows], bv[kCols];
#pragma unroll
    for (int i = 0; i < kRows; i++) av[i] = *reinterpret_cast<const float4*>(a + (ty + kGridY * i) * kLd + d);
#pragma unroll
    for (int j = 0; j < kCols; j++) bv[j] = *reinterpret_cast<const float4*>(b + (tx + kGridX * j) * kLd + d);
#pragma unroll
    for (int i = 0; i < kRows; i++)
#pragma unroll
      for (int j = 0; j < kCols; j++) {
        s[i][j] = fmaf(av[i].x, bv[j].x, s[i][j]);
        s[i][j] = fmaf(av[i].y, bv[j].y, s[i][j]);
        s[i][j] = fmaf(av[i].z, bv[j].z, s[i][j]);
        s[i][j] = fmaf(av[i].w, bv[j].w, s[i][j]);
      }
  }
}

// acc += p m over the tile's kTile keys: p a shared (kTile, kTile) score tile (row stride kLdScores),
// m a shared (kTile, HS) tile; acc holds rows ty + 16 i, column groups as in HeadTile.
template <int HS>
__device__ __forceinline__ void tile_accumulate(float (&acc)[kRows][HeadTile<HS>::kAcc], const float* p,
                                                const float* m) {
  using H = HeadTile<HS>;
  const int ty = int(threadIdx.x) / kGridX, tx = int(threadIdx.x) % kGridX;
#pragma unroll 2
  for (int k = 0; k < kTile; k += 4) {
    float4 pv[kRows];
#pragma unroll
    for (int i = 0; i < kRows; i++) pv[i] = *reinterpret_cast<const float4*>(p + (ty + kGridY * i) * kLdScores + k);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
      const float* m_row = m + (k + kk) * H::kLd + tx * H::kVec;
#pragma unroll
      for (int g = 0; g < H::kGroups; g++) {
        float mv[H::kVec];
        if constexpr (H::kVec == 4) {
          const float4 t = *reinterpret_cast<const float4*>(m_row + g * kGridX * 4);
          mv[0] = t.x, mv[1] = t.y, mv[2] = t.z, mv[3] = t.w;
        } else {
          const float2 t = *reinterpret_cast<const float2*>(m_row + g * kGridX * 2);
          mv[0] = t.x, mv[1] = t.y;
        }
#pragma unroll
        for (int i = 0; i < kRows; i++)
#pragma unroll
          for (int v = 0; v < H::kVec; v++)
            acc[i][g * H::kVec + v] = fmaf(component(pv[i], kk), mv[v], acc[i][g * H::kVec + v]);
      }
    }
  }
}

// factor * one row of a thread's accumulator share, to its columns of dst (HS) in global memory.
template <int HS, typename Elem>
__device__ __forceinline__ void store_row(Elem* dst, const float (&acc)[HeadTile<HS>::kAcc], float factor) {
  using H = HeadTile<HS>;
  const int tx = int(threadIdx.x) % kGridX;
#pragma unroll
  for (int g = 0; g < H::kGroups; g++) {
    float v[H::kVec];
#pragma unroll
    for (int c = 0; c < H::kVec; c++) v[c] = acc[g * H::kVec + c] * factor;
    store_group(dst + tx * H::kVec + g * kGridX * H::kVec, v);
  }
}

// --- kernels ---

// delta (B,NH,T) = sum over a head's HS channels of dout * out, both (B,T,C); one thread per (b,t,h).
// HS is a multiple of kVec<E> (every head size here is a multiple of 16).
template <typename E>
__global__ void attention_delta_kernel(float* delta, const E* dout, const E* out, int64_t B, int T, int NH, int HS) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (b * T + t) * NH + h
  if (idx >= B * T * NH) return;
  const int64_t bt = idx / NH, b = bt / T;
  const int h = int(idx % NH), t = int(bt % T);
  const E* dout_row = dout + idx * HS;  // = (b * T + t) * C + h * HS
  const E* out_row = out + idx * HS;
  constexpr int kW = kVec<E>;
  float sum = 0.0f;
  for (int d = 0; d < HS; d += kW) {
    float x[kW], y[kW];
    load_f32_vec(x, dout_row + d);
    load_f32_vec(y, out_row + d);
#pragma unroll
    for (int k = 0; k < kW; k++) sum = fmaf(x[k], y[k], sum);
  }
  delta[(b * NH + h) * T + t] = sum;
}

// Queues attention_delta_kernel over (B,T,NH) on `stream`.
template <typename E>
void launch_attention_delta(float* delta, const E* dout, const E* out, int64_t B, int64_t T, int64_t NH, int HS,
                            cudaStream_t stream) {
  constexpr int kBlock = 256;
  attention_delta_kernel<E><<<unsigned(ceil_div(B * T * NH, kBlock)), kBlock, 0, stream>>>(delta, dout, out, B,
                                                                                           int(T), int(NH), HS);
  CUDA_CHECK_LAUNCH();
}


// Grid (B NH, query tiles), last query tile first (it sees the most keys). out (B,T,C), lse (B,NH,T)
// from qkv (B,T,(NH+2NKV)HS). Scores are kept in log2 units, s log2(e) / sqrt(HS), for exp2f. With
// doc_starts (B,T) the key tiles start at the one holding the tile's first row's document start (the
// smallest of its rows'), and a row may see no key of the first tiles visited. kDocs: doc_starts is
// non-null (without, the mask code folds away).
template <typename Elem, int HS, bool kDocs>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Elem* out, float* lse, const Elem* qkv, const int32_t* doc_starts, int T,
                             QkvHeads heads, float scale) {
  if constexpr (!kDocs) doc_starts = nullptr;
  using H = HeadTile<HS>;
  extern __shared__ float4 shared_quads[];
  float* q_s = reinterpret_cast<float*>(shared_quads);  // (kTile, kLd)
  float* k_s = q_s + H::kFloats;                         // (kTile, kLd)
  float* v_s = k_s + H::kFloats;                         // (kTile, kLd)
  float* p_s = v_s + H::kFloats;                         // (kTile, kLdScores)
  const int ty = int(threadIdx.x) / kGridX, tx = int(threadIdx.x) % kGridX;
  const int NH = heads.NH, b = int(blockIdx.x) / NH, h = int(blockIdx.x) % NH;
  const int qt = int(gridDim.y) - 1 - int(blockIdx.y), C = NH * HS, q0 = qt * kTile;
  const int64_t ld = heads.row_stride();
  const auto [q, k, v] = head_rows(heads, qkv, b, T, h);  // (T, HS) each, row stride ld
  const float scale_log2 = scale * kLog2e;

  load_tile<HS>(q_s, q, ld, q0, T);
  float o[kRows][H::kAcc] = {};
  float m[kRows], l[kRows];  // running max (log2 units) and this thread's part of the row sum
  int start[kRows];          // each row's document start (0 without doc_starts)
#pragma unroll
  for (int i = 0; i < kRows; i++) {
    m[i] = -INFINITY, l[i] = 0.0f;
    start[i] = doc_start(doc_starts, b, T, q0 + ty + kGridY * i);
  }
  // The tile's rows' starts lie in [first row's, last row's]: tiles before the first are skipped, and
  // tiles from the last on need no document check.
  const int first_start = doc_start(doc_starts, b, T, q0);
  const int last_start = doc_start(doc_starts, b, T, min(q0 + kTile, T) - 1);
  for (int kt = first_start / kTile; kt <= qt; kt++) {
    const int k0 = kt * kTile;
    const bool check_docs = k0 < last_start;  // uniform over the block; never without doc_starts
    __syncthreads();  // the previous key tile's k, v and p are no longer read
    load_tile<HS>(k_s, k, ld, k0, T);
    load_tile<HS>(v_s, v, ld, k0, T);
    __syncthreads();
    float s[kRows][kCols];
    tile_scores<HS>(s, q_s, k_s);
#pragma unroll
    for (int i = 0; i < kRows; i++) {
      const int row = q0 + ty + kGridY * i;
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kCols; j++) {
        // Keys past T lie above the diagonal; keys before the row's document start are hidden as well.
        const int key = k0 + tx + kGridX * j;
        const bool visible = (kt < qt || key <= row) && (!check_docs || key >= start[i]);
        s[i][j] = visible ? s[i][j] * scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      // m_new is -inf while the row's document starts past every key so far (never without doc_starts: key
      // 0 is visible to every row); 0 then stands in as the exponents' base, so alpha = p = 0, not NaN.
      const float m_new = fmaxf(m[i], row_max(tile_max));
      const float base = kDocs && m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[i] - base);
      m[i] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kCols; j++) {
        const float p = exp2f(s[i][j] - base);
        sum += p;
        p_s[(ty + kGridY * i) * kLdScores + tx + kGridX * j] = p;
      }
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int c = 0; c < H::kAcc; c++) o[i][c] *= alpha;
    }
    __syncthreads();
    tile_accumulate<HS>(o, p_s, v_s);
  }
#pragma unroll
  for (int i = 0; i < kRows; i++) {
    const float sum = row_sum(l[i]);
    const int row = q0 + ty + kGridY * i;
    if (row >= T) continue;
    store_row<HS>(out + (int64_t(b) * T + row) * C + h * HS, o[i], 1.0f / sum);
    if (tx == 0) lse[(int64_t(b) * NH + h) * T + row] = m[i] * kLn2 + logf(sum);
  }
}

// Grid (B NKV, key tiles), first key tile first (it sees the most queries). dk and dv rows of dqkv
// (B,T,(NH+2NKV)HS) for one key tile of one kv head, summing over the group's query heads and, for
// each, the query tiles at or below the diagonal, in order:
//   dv = P^T dout,  dk = scale dS^T q,  P = exp(s - lse),  dS = P (dout v^T - delta).
// Works on transposed score tiles (keys as rows) so a thread's score rows are its dk, dv rows. With
// doc_starts (kDocs) the query tiles stop before the first whose first row's document starts past the
// key tile.
template <typename Elem, int HS, bool kDocs>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(Elem* dqkv, const Elem* dout, const Elem* qkv, const float* lse,
                                   const float* delta, const int32_t* doc_starts, int T, QkvHeads heads,
                                   float scale) {
  if constexpr (!kDocs) doc_starts = nullptr;
  using H = HeadTile<HS>;
  extern __shared__ float4 shared_quads[];
  float* k_s = reinterpret_cast<float*>(shared_quads);  // (kTile, kLd)
  float* v_s = k_s + H::kFloats;                         // (kTile, kLd)
  float* q_s = v_s + H::kFloats;                         // (kTile, kLd)
  float* do_s = q_s + H::kFloats;                        // (kTile, kLd)
  float* p_s = do_s + H::kFloats;                        // (kTile, kLdScores): P^T, then dS^T
  float* lse_s = p_s + kTile * kLdScores;                // (kTile), log2 units
  float* delta_s = lse_s + kTile;                        // (kTile)
  int* start_s = reinterpret_cast<int*>(delta_s + kTile);  // (kTile), document starts; with doc_starts only
  const int ty = int(threadIdx.x) / kGridX, tx = int(threadIdx.x) % kGridX;
  const int NH = heads.NH, b = int(blockIdx.x) / heads.NKV, kv = int(blockIdx.x) % heads.NKV, kt = int(blockIdx.y);
  const int C = NH * HS, k0 = kt * kTile, query_tiles = (T + kTile - 1) / kTile;
  const int64_t ld = heads.row_stride();
  const Elem* qkv_b = qkv + int64_t(b) * T * ld;
  const float scale_log2 = scale * kLog2e;

  load_tile<HS>(k_s, qkv_b + heads.k_column(kv), ld, k0, T);
  load_tile<HS>(v_s, qkv_b + heads.v_column(kv), ld, k0, T);
  float dk[kRows][H::kAcc] = {}, dv[kRows][H::kAcc] = {};
  // Query tiles at or below the diagonal whose rows may see a key of this tile.
  const int tiles_per_head = doc_query_tiles_end(doc_starts, b, T, kTile, kt, query_tiles, k0 + kTile - 1) - kt;
  for (int step = 0; step < heads.group() * tiles_per_head; step++) {
    const int h = kv * heads.group() + step / tiles_per_head, qt = kt + step % tiles_per_head;
    const Elem* q = qkv_b + heads.q_column(h);                 // (T, HS), row stride ld
    const Elem* dout_bh = dout + int64_t(b) * T * C + h * HS;  // (T, HS), row stride C
    const float* lse_bh = lse + (int64_t(b) * NH + h) * T;     // (T)
    const float* delta_bh = delta + (int64_t(b) * NH + h) * T;  // (T)
    const int q0 = qt * kTile;
    __syncthreads();  // the previous query tile's q, dout and p_s are no longer read
    load_tile<HS>(q_s, q, ld, q0, T);
    load_tile<HS>(do_s, dout_bh, C, q0, T);
    if (threadIdx.x < kTile) {
      const int row = q0 + int(threadIdx.x);
      lse_s[threadIdx.x] = row < T ? lse_bh[row] * kLog2e : 0.0f;
      delta_s[threadIdx.x] = row < T ? delta_bh[row] : 0.0f;
      if (doc_starts != nullptr) start_s[threadIdx.x] = doc_start(doc_starts, b, T, row);
    }
    __syncthreads();
    // Some query's document starts past key k0 (the last valid query's start is the largest).
    const bool check_docs = kDocs && start_s[min(kTile, T - q0) - 1] > k0;
    float s[kRows][kCols];
    tile_scores<HS>(s, k_s, q_s);  // s^T: key rows, query columns
#pragma unroll
    for (int i = 0; i < kRows; i++)
#pragma unroll
      for (int j = 0; j < kCols; j++) {
        const int key = k0 + ty + kGridY * i, query = q0 + tx + kGridX * j;
        const bool visible = query < T && key <= query && (!check_docs || key >= start_s[tx + kGridX * j]);
        p_s[(ty + kGridY * i) * kLdScores + tx + kGridX * j] =
            visible ? exp2f(fmaf(s[i][j], scale_log2, -lse_s[tx + kGridX * j])) : 0.0f;
      }
    __syncthreads();
    tile_accumulate<HS>(dv, p_s, do_s);
    tile_scores<HS>(s, v_s, do_s);  // (dout v^T)^T
#pragma unroll
    for (int i = 0; i < kRows; i++)  // dS^T, from this thread's own entries of P^T
#pragma unroll
      for (int j = 0; j < kCols; j++)
        s[i][j] = p_s[(ty + kGridY * i) * kLdScores + tx + kGridX * j] * (s[i][j] - delta_s[tx + kGridX * j]);
    __syncthreads();  // every thread is done with P^T; dS^T takes its place
#pragma unroll
    for (int i = 0; i < kRows; i++)
#pragma unroll
      for (int j = 0; j < kCols; j++) p_s[(ty + kGridY * i) * kLdScores + tx + kGridX * j] = s[i][j];
    __syncthreads();
    tile_accumulate<HS>(dk, p_s, q_s);
  }
#pragma unroll
  for (int i = 0; i < kRows; i++) {
    const int row = k0 + ty + kGridY * i;
    if (row >= T) continue;
    Elem* dqkv_row = dqkv + (int64_t(b) * T + row) * ld;
    store_row<HS>(dqkv_row + heads.k_column(kv), dk[i], scale);
    store_row<HS>(dqkv_row + heads.v_column(kv), dv[i], 1.0f);
  }
}

// Grid (B NH, query tiles), last query tile first. dq rows of dqkv for one query tile,
// summing over the key tiles at or below the diagonal in order: dq = scale dS k. With doc_starts the key
// tiles start at the one holding the tile's first row's document start, as in the forward (kDocs).
template <typename Elem, int HS, bool kDocs>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(Elem* dqkv, const Elem* dout, const Elem* qkv, const float* lse,
                                 const float* delta, const int32_t* doc_starts, int T, QkvHeads heads,
                                 float scale) {
  if constexpr (!kDocs) doc_starts = nullptr;
  using H = HeadTile<HS>;
  extern __shared__ float4 shared_quads[];
  float* q_s = reinterpret_cast<float*>(shared_quads);  // (kTile, kLd)
  float* do_s = q_s + H::kFloats;                        // (kTile, kLd)
  float* k_s = do_s + H::kFloats;                        // (kTile, kLd)
  float* v_s = k_s + H::kFloats;                         // (kTile, kLd)
  float* ds_s = v_s + H::kFloats;                        // (kTile, kLdScores)
  float* lse_s = ds_s + kTile * kLdScores;               // (kTile), log2 units
  float* delta_s = lse_s + kTile;                        // (kTile)
  const int ty = int(threadIdx.x) / kGridX, tx = int(threadIdx.x) % kGridX;
  const int NH = heads.NH, b = int(blockIdx.x) / NH, h = int(blockIdx.x) % NH;
  const int qt = int(gridDim.y) - 1 - int(blockIdx.y), C = NH * HS, q0 = qt * kTile;
  const int64_t ld = heads.row_stride();
  const auto [q, k, v] = head_rows(heads, qkv, b, T, h);  // (T, HS) each, row stride ld
  const Elem* dout_bh = dout + int64_t(b) * T * C + h * HS;  // (T, HS), row stride C
  const float scale_log2 = scale * kLog2e;

  load_tile<HS>(q_s, q, ld, q0, T);
  load_tile<HS>(do_s, dout_bh, C, q0, T);
  if (threadIdx.x < kTile) {  // rows past T get finite values and are never stored
    const int row = q0 + int(threadIdx.x);
    lse_s[threadIdx.x] = row < T ? lse[(int64_t(b) * NH + h) * T + row] * kLog2e : 0.0f;
    delta_s[threadIdx.x] = row < T ? delta[(int64_t(b) * NH + h) * T + row] : 0.0f;
  }
  float dq[kRows][H::kAcc] = {};
  int start[kRows];  // each row's document start (0 without doc_starts)
#pragma unroll
  for (int i = 0; i < kRows; i++) start[i] = doc_start(doc_starts, b, T, q0 + ty + kGridY * i);
  const int first_start = doc_start(doc_starts, b, T, q0);
  const int last_start = doc_start(doc_starts, b, T, min(q0 + kTile, T) - 1);
  for (int kt = first_start / kTile; kt <= qt; kt++) {
    const int k0 = kt * kTile;
    const bool check_docs = k0 < last_start;  // uniform over the block; never without doc_starts
    __syncthreads();  // the previous key tile's k and dS are no longer read
    load_tile<HS>(k_s, k, ld, k0, T);
    load_tile<HS>(v_s, v, ld, k0, T);
    __syncthreads();
    float p[kRows][kCols], dp[kRows][kCols];
    tile_scores<HS>(p, q_s, k_s);
    tile_scores<HS>(dp, do_s, v_s);
#pragma unroll
    for (int i = 0; i < kRows; i++)
#pragma unroll
      for (int j = 0; j < kCols; j++) {
        const int row = q0 + ty + kGridY * i, key = k0 + tx + kGridX * j;
        const bool visible = (kt < qt || key <= row) && (!check_docs || key >= start[i]);
        const float pij = visible ? exp2f(fmaf(p[i][j], scale_log2, -lse_s[ty + kGridY * i])) : 0.0f;
        ds_s[(ty + kGridY * i) * kLdScores + tx + kGridX * j] = pij * (dp[i][j] - delta_s[ty + kGridY * i]);
      }
    __syncthreads();
    tile_accumulate<HS>(dq, ds_s, k_s);
  }
#pragma unroll
  for (int i = 0; i < kRows; i++) {
    const int row = q0 + ty + kGridY * i;
    if (row < T) store_row<HS>(dqkv + (int64_t(b) * T + row) * ld + heads.q_column(h), dq[i], scale);
  }
}

// --- launch configuration ---

constexpr size_t forward_shared_bytes(int HS) {
  return sizeof(float) * (3 * kTile * (HS + 4) + kTile * kLdScores);
}
// The dk, dv kernel also keeps a query tile's document starts when it has doc_starts.
constexpr size_t backward_shared_bytes(int HS, bool doc_starts = false) {
  return sizeof(float) * (4 * kTile * (HS + 4) + kTile * kLdScores + 2 * kTile) +
         (doc_starts ? sizeof(int) * kTile : 0);
}

// bf16 and f16 at HS 32, 64 and 128 run on the tensor-core kernels (or cuDNN's): ops/attention.cpp sends
// them there whenever the pointers are 16-byte aligned, and these kernels need that too. Those kernels
// are not built here (a third of this file's compile time).
constexpr bool built_here(bool f32, int64_t HS) { return f32 || !(HS == 32 || HS == 64 || HS == 128); }
template <typename Elem, int HS>
constexpr bool kBuiltHere = built_here(std::is_same_v<Elem, float>, HS);

// Calls f(std::integral_constant<int, HS>{}) for a head size with a kernel; throws for any other.
template <typename F>
void with_head_size(const char* op, int64_t HS, F&& f) {
  switch (HS) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 48: return f(std::integral_constant<int, 48>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 80: return f(std::integral_constant<int, 80>{});
    case 96: return f(std::integral_constant<int, 96>{});
    case 128: return f(std::integral_constant<int, 128>{});
    default:
      TS_FAIL(op, ": no CUDA kernel for head size HS = C/NH = ", HS, "; supported head sizes: ", kHeadSizes,
              " (pick n_embd and n_head to match)");
  }
}

template <typename Elem>
void check_built_here(const char* op, int64_t HS) {
  TS_CHECK(built_here(std::is_same_v<Elem, float>, HS), op, ": bf16 and f16 at head size ", HS,
           " run on the tensor-core kernels (attention_tc_cuda.h) or cuDNN's, which this kernel does not duplicate; ",
           "call the op in ops/attention.h, which picks the kernel");
}

// A device pointer and the argument name it is reported under.
struct NamedPointer {
  const char* name;
  const void* pointer;
};

// Everything the kernels assume about the sizes and pointers, checked before anything is queued.
// Rows and head slices are 16-byte aligned whenever the tensors are (HS is a multiple of 16, so a
// row of qkv, 3C elements, is a multiple of 96 bytes in bf16 and 192 in fp32).
void check_launch(const char* op, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                  std::initializer_list<NamedPointer> pointers) {
  TS_CHECK(NH > 0 && C % NH == 0, op, ": ", NH, " heads do not split C = ", C, " channels evenly");
  TS_CHECK(NKV > 0 && NH % NKV == 0, op, ": ", NKV, " kv heads do not divide ", NH, " query heads");
  with_head_size(op, C / NH, [](auto) {});
  TS_CHECK(B * NH <= INT32_MAX && ceil_div(T, kTile) <= 65535, op, ": B = ", B, ", NH = ", NH, ", T = ", T,
           " exceed the CUDA kernel's grid (B NH < 2^31, T <= ", 65535 * kTile, ")");
  for (const auto& [name, pointer] : pointers)
    TS_CHECK(is_aligned16(pointer), op, ": the CUDA kernel needs 16-byte aligned tensors, but ", name, " starts ",
             reinterpret_cast<uintptr_t>(pointer) % 16,
             " bytes past a 16-byte boundary; pass a tensor that starts at its allocation, or a view whose offset "
             "is a multiple of 16 bytes (4 f32 or 8 bf16 or f16 elements), e.g. a copy into a fresh tensor");
}

}  // namespace

// --- launchers ---

template <typename Elem>
void attention_forward(Elem* out, float* lse, const Elem* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV, const int32_t* doc_starts, cudaStream_t stream) {
  const char* op = "attention_forward";
  check_launch(op, B, T, C, NH, NKV, {{"out", out}, {"lse", lse}, {"qkv", qkv}});
  check_built_here<Elem>(op, C / NH);
  if (B == 0 || T == 0) return;
  const QkvHeads heads{int(NH), int(NKV), int(C / NH)};
  const float scale = 1.0f / std::sqrt(float(heads.HS));
  const dim3 grid(unsigned(B * NH), unsigned(ceil_div(T, kTile)));  // tiles vary slowest: heavy ones first
  with_head_size(op, heads.HS, [&](auto hs) {
    with_doc_mask(doc_starts, [&](auto docs) {
      constexpr int kHS = decltype(hs)::value;
      if constexpr (kBuiltHere<Elem, kHS>) {  // check_built_here refused the others
        constexpr bool kDocs = decltype(docs)::value;
        launch_with_shared(attention_forward_kernel<Elem, kHS, kDocs>, grid, kThreads, forward_shared_bytes(kHS),
                           stream, out, lse, qkv, doc_starts, int(T), heads, scale);
      }
    });
  });
}

template <typename Elem>
void attention_backward(Elem* dqkv, const Elem* dout, const Elem* qkv, const Elem* out, const float* lse,
                        int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, const int32_t* doc_starts,
                        cudaStream_t stream) {
  const char* op = "attention_backward";
  check_launch(op, B, T, C, NH, NKV, {{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"out", out}, {"lse", lse}});
  check_built_here<Elem>(op, C / NH);
  if (B == 0 || T == 0) return;
  const QkvHeads heads{int(NH), int(NKV), int(C / NH)};
  const float scale = 1.0f / std::sqrt(float(heads.HS));
  const DeviceScratch delta_buffer(size_t(B * NH * T) * sizeof(float));
  float* delta = delta_buffer.as<float>();  // (B,NH,T)
  launch_attention_delta(delta, dout, out, B, T, NH, heads.HS, stream);
  const unsigned tiles = unsigned(ceil_div(T, kTile));  // tiles vary slowest: heavy ones first
  with_head_size(op, heads.HS, [&](auto hs) {
    with_doc_mask(doc_starts, [&](auto docs) {
      constexpr int kHS = decltype(hs)::value;
      if constexpr (kBuiltHere<Elem, kHS>) {  // check_built_here refused the others
        constexpr bool kDocs = decltype(docs)::value;
        // The two kernels write disjoint parts of dqkv (dk, dv and dq), every row from one block only.
        launch_with_shared(attention_backward_dkdv_kernel<Elem, kHS, kDocs>, dim3(unsigned(B * NKV), tiles), kThreads,
                           backward_shared_bytes(kHS, kDocs), stream, dqkv, dout, qkv, lse,
                           static_cast<const float*>(delta), doc_starts, int(T), heads, scale);
        launch_with_shared(attention_backward_dq_kernel<Elem, kHS, kDocs>, dim3(unsigned(B * NH), tiles), kThreads,
                           backward_shared_bytes(kHS), stream, dqkv, dout, qkv, lse, static_cast<const float*>(delta),
                           doc_starts, int(T), heads, scale);
      }
    });
  });
}

#define INSTANTIATE(Elem)                                                                                    \
  template void attention_forward<Elem>(Elem*, float*, const Elem*, int64_t, int64_t, int64_t, int64_t, int64_t,  \
                                        const int32_t*, cudaStream_t);                                           \
  template void attention_backward<Elem>(Elem*, const Elem*, const Elem*, const Elem*, const float*, int64_t,      \
                                         int64_t, int64_t, int64_t, int64_t, const int32_t*, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
