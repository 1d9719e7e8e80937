// Causal self-attention in bf16 or fp16 (element type E) on tensor cores (sm_80+), FlashAttention-2 style;
// contract in ops/attention.h, launchers in attention_tc_cuda.h. Blocks of 4 warps take one (64-row tile,
// head, batch), each warp 16 rows; products by mma.sync m16n8k16 (E operands, fp32 accumulators),
// operands from padded shared tiles by ldmatrix, tiles streamed in by cp.async two stages deep; no (T,T)
// matrix reaches global memory. Forward: online softmax in registers, P rounded to E for P v. Backward,
// deterministic (no atomics): one kernel per query tile for dq, which also computes and stores delta =
// rowsum(dout * out), then one per key tile for dk and dv, P from lse. Grouped-query attention reads a
// query head's kv head; dk, dv of a kv head sum over its group's query heads in order. Document masks
// (doc_starts non-null) hide the keys before a row's document start like the causal mask hides those
// after it, and skip the tiles no row sees.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/device.h"
#include "ops/cuda/attention_tc_cuda.h"
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

constexpr int kTile = 64;  // query and key rows per tile
constexpr int kWarps = 4;  // 16 rows of a tile each
constexpr int kThreads = kWarps * kWarpSize;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

// A (kTile, HS) tile of 16-bit elements in shared memory, rows padded by 16 bytes: the 8 row addresses of one
// ldmatrix 8x8 matrix (same column, consecutive rows, (HS + 8) * 2 bytes apart) then fall in 8 distinct
// 16-byte bank groups, and every row start stays 16-byte aligned for cp.async and ldmatrix.
template <int HS>
struct Tile {
  static_assert(HS == 32 || HS == 64 || HS == 128, "tensor-core attention covers HS = 32, 64, 128");
  static constexpr int kLd = HS + 8;
  static constexpr int kElems = kTile * kLd;
};

// --- PTX wrappers ---

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zeros when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix .x4: lanes 8i..8i+7 give the row addresses (16 bytes each) of 8x8 16-bit matrix i; afterwards
// r[i] of lane l holds matrix i's row l/4, columns 2(l%4), 2(l%4)+1 (low half first). With .trans lane
// l gets rows 2(l%4), 2(l%4)+1 of column l/4 instead, i.e. the same slots of the transposed matrix.
template <typename E>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const E* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}
template <typename E>
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const E* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// c (16x8, fp32) += a (16x16, E, row-major) b (16x8, E, column-major). Fragments (PTX ISA,
// "Matrix Fragments for mma.m16n8k16"), with g = lane / 4, t = lane % 4, each register two E with
// the lower column (A) or lower row (B) in the low half:
//   a[0]: A[g][2t..2t+1]   a[1]: A[g+8][2t..2t+1]   a[2]: A[g][2t+8..2t+9]   a[3]: A[g+8][2t+8..2t+9]
//   b0:   B[2t..2t+1][g]   b1:   B[2t+8..2t+9][g]
//   c[0], c[1]: C[g][2t], C[g][2t+1]               c[2], c[3]: C[g+8][2t], C[g+8][2t+1]
template <typename E>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<E, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (lo, hi) rounded to E, lo in the low half (the lower address).
template <typename E>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t bits;
  if constexpr (std::is_same_v<E, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&bits, &v, sizeof(bits));
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &v, sizeof(bits));
  }
  return bits;
}

// --- warp-level fragments and products ---
// A warp's (16, N) fp32 accumulator is acc[N/8][4]: acc[n][e] is row g + 8 (e / 2), column 8 n + 2 t + e % 2.

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) % kWarpSize; }

// The A fragment of rows [row0, row0 + 16) x columns [k0, k0 + 16) of a shared tile (row stride ld):
// matrices 0..3 of the ldmatrix are (rows +0, cols +0), (+8, +0), (+0, +8), (+8, +8) = a[0..3]; lane l
// addresses row row0 + l % 16, column k0 + 8 (l / 16).
template <typename E>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const E* tile, int ld, int row0, int k0) {
  const int lane = lane_id();
  ldmatrix_x4(a, tile + (row0 + lane % 16) * ld + k0 + lane / 16 * 8);
}
// All K / 16 A fragments of rows [row0, row0 + 16) x columns [0, K).
template <int K, typename E>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[K / 16][4], const E* tile, int ld, int row0) {
#pragma unroll
  for (int kk = 0; kk < K / 16; kk++) load_a(a[kk], tile, ld, row0, 16 * kk);
}

// B fragments of two n8 blocks with B[k][n] = tile[n0 + n][k0 + k] (tile rows are B's columns, as k
// for q k^T): matrices (rows n0+0..7, cols k0+0..7), (n0+0..7, k0+8..15), (n0+8..15, k0), (n0+8..15,
// k0+8) = b[0..3], i.e. (b0, b1) of block n0 then of block n0 + 8. Non-transposed: lane g's register
// holds tile[n0 + g][k0 + 2t..], which is B[2t..][g], as the b0 slot asks.
template <typename E>
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const E* tile, int ld, int n0, int k0) {
  const int lane = lane_id();
  ldmatrix_x4(b, tile + (n0 + lane % 8 + lane / 16 * 8) * ld + k0 + lane / 8 % 2 * 8);
}

// B fragments of two n8 blocks with B[k][n] = tile[k0 + k][n0 + n] (tile rows are B's rows, as v for
// p v), transposed on load: matrices (k0+0..7, n0+0..7), (k0+8..15, n0), (k0, n0+8..15), (k0+8, n0+8)
// = b[0..3]; .trans gives lane (g, t) tile[k0 + 2t..][n0 + g] = B[2t..][g].
template <typename E>
__device__ __forceinline__ void load_b_cols(uint32_t (&b)[4], const E* tile, int ld, int k0, int n0) {
  const int lane = lane_id();
  ldmatrix_x4_trans(b, tile + (k0 + lane % 16) * ld + n0 + lane / 16 * 8);
}

// acc (16, N) += a (16, 16) b^T, b = rows [0, N) x columns [k0, k0 + 16) of a shared tile (row stride ld).
template <int N, typename E>
__device__ __forceinline__ void mma_abt_block(float (&acc)[N / 8][4], const uint32_t (&a)[4], const E* b, int ld,
                                              int k0) {
#pragma unroll
  for (int n = 0; n < N / 16; n++) {
    uint32_t f[4];
    load_b_rows(f, b, ld, 16 * n, k0);
    mma<E>(acc[2 * n], a, f[0], f[1]);
    mma<E>(acc[2 * n + 1], a, f[2], f[3]);
  }
}

// acc (16, N) += a (16, K) b^T, b = rows [0, N) x columns [0, K) of a shared tile (row stride ld).
template <int K, int N, typename E>
__device__ __forceinline__ void mma_abt(float (&acc)[N / 8][4], const uint32_t (&a)[K / 16][4], const E* b, int ld) {
#pragma unroll
  for (int kk = 0; kk < K / 16; kk++) mma_abt_block<N>(acc, a[kk], b, ld, 16 * kk);
}

// The same with a = rows [row0, row0 + 16) of a shared tile too, read one fragment at a time (fewer
// registers than holding all K / 16).
template <int K, int N, typename E>
__device__ __forceinline__ void mma_abt_shared(float (&acc)[N / 8][4], const E* a, int row0, const E* b, int ld) {
#pragma unroll
  for (int kk = 0; kk < K / 16; kk++) {
    uint32_t f[4];
    load_a(f, a, ld, row0, 16 * kk);
    mma_abt_block<N>(acc, f, b, ld, 16 * kk);
  }
}

// acc (16, N) += a (16, K) b, b = rows [0, K) x columns [0, N) of a shared tile (row stride ld).
template <int K, int N, typename E>
__device__ __forceinline__ void mma_ab(float (&acc)[N / 8][4], const uint32_t (&a)[K / 16][4], const E* b, int ld) {
#pragma unroll
  for (int kk = 0; kk < K / 16; kk++)
#pragma unroll
    for (int n = 0; n < N / 16; n++) {
      uint32_t f[4];
      load_b_cols(f, b, ld, 16 * kk, 16 * n);
      mma<E>(acc[2 * n], a[kk], f[0], f[1]);
      mma<E>(acc[2 * n + 1], a[kk], f[2], f[3]);
    }
}

// A (16, N) accumulator as A fragments in E: columns 16 j .. 16 j + 15 are accumulator blocks 2 j
// (a[j][0], a[j][1]: rows g, g + 8) and 2 j + 1 (a[j][2], a[j][3]), the same (row, column) slots.
template <int N, typename E>
__device__ __forceinline__ void to_a_frags(uint32_t (&a)[N / 16][4], const float (&c)[N / 8][4]) {
#pragma unroll
  for (int j = 0; j < N / 16; j++) {
    a[j][0] = pack2<E>(c[2 * j][0], c[2 * j][1]);
    a[j][1] = pack2<E>(c[2 * j][2], c[2 * j][3]);
    a[j][2] = pack2<E>(c[2 * j + 1][0], c[2 * j + 1][1]);
    a[j][3] = pack2<E>(c[2 * j + 1][2], c[2 * j + 1][3]);
  }
}

// Max and sum over the 4 lanes (t = 0..3) that share a row.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// dst (kTile, HS), row stride kLd, = rows [row0, row0 + kTile) of src (T, HS), row stride ld, queued
// by cp.async (the caller commits); rows at or past T are zeros.
template <int HS, typename E>
__device__ __forceinline__ void load_tile_async(E* dst, const E* src, int64_t ld, int row0, int T) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  static_assert(kTile * kChunks % kThreads == 0);
#pragma unroll
  for (int n = 0; n < kTile * kChunks / kThreads; n++) {
    const int idx = n * kThreads + int(threadIdx.x), r = idx / kChunks, c = idx % kChunks * 8;
    const bool valid = row0 + r < T;
    cp_async16(dst + r * Tile<HS>::kLd + c, valid ? src + int64_t(row0 + r) * ld + c : src, valid);
  }
}

// factor * a warp's (16, HS) accumulator, rows row0 + g + 8 r below T, to dst (T, HS) with row stride ld.
template <int HS, typename E>
__device__ __forceinline__ void store_rows(E* dst, int64_t ld, const float (&acc)[HS / 8][4], int row0, int T,
                                           const float (&factor)[2]) {
  const int g = lane_id() / 4, t = lane_id() % 4;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + g + 8 * r;
    if (row >= T) continue;
#pragma unroll
    for (int n = 0; n < HS / 8; n++)
      *reinterpret_cast<uint32_t*>(dst + row * ld + 8 * n + 2 * t) =
          pack2<E>(acc[n][2 * r] * factor[r], acc[n][2 * r + 1] * factor[r]);
  }
}

// Blocks per SM the dk/dv kernel is compiled for, i.e. its register budget: left alone it takes 234
// registers for HS = 64 (2 blocks, 8 warps per SM); capped for the 3 blocks its shared memory admits it
// takes 168 with 4 bytes spilled and runs 12% faster on an H100. The same cap on the forward (4 blocks)
// gained nothing and on dq (4 blocks, 60 bytes spilled) lost 10%; HS = 128 keeps the compiler's choice
// (its shared tiles allow 2 blocks anyway).
template <int HS>
constexpr int kDkdvMinBlocks = HS <= 64 ? 3 : 1;

// --- kernels ---

// Grid (B NH, query tiles), last query tile first (it sees the most keys). out (B,T,C), lse (B,NH,T)
// from qkv (B,T,(NH+2NKV)HS). Scores in log2 units, s log2(e) / sqrt(HS), for exp2f. The key tiles run
// from kt0, the tile holding the document start of the tile's first row (the smallest of its rows'; 0
// without doc_starts), to the diagonal; tile kt is read from stage (kt - kt0) % 2 while tile kt + 1
// streams into the other. kDocs: doc_starts is non-null (without, the mask code folds away).
template <typename E, int HS, bool kDocs>
__global__ void __launch_bounds__(kThreads)
    attention_tc_forward_kernel(E* out, float* lse, const E* qkv, const int32_t* doc_starts, int T, QkvHeads heads,
                                float scale_log2) {
  if constexpr (!kDocs) doc_starts = nullptr;
  using S = Tile<HS>;
  extern __shared__ float4 shared_quads[];
  E* q_s = reinterpret_cast<E*>(shared_quads);  // (kTile, kLd)
  E* k_s = q_s + S::kElems;                     // 2 stages of (kTile, kLd)
  E* v_s = k_s + 2 * S::kElems;                 // 2 stages of (kTile, kLd)
  const int warp = int(threadIdx.x) / kWarpSize, g = lane_id() / 4, t = lane_id() % 4;
  const int NH = heads.NH, b = int(blockIdx.x) / NH, h = int(blockIdx.x) % NH;
  const int qt = int(gridDim.y) - 1 - int(blockIdx.y), C = NH * HS;
  const int q0 = qt * kTile, row0 = q0 + 16 * warp;  // this warp's rows row0 + g + 8 r
  const int64_t ld = heads.row_stride();
  const auto [q, k, v] = head_rows(heads, qkv, b, T, h);  // (T, HS) each, row stride ld
  // The tile's rows' document starts lie in [first row's, last row's]: key tiles from the last on need
  // no document check.
  const int kt0 = doc_start(doc_starts, b, T, q0) / kTile;
  const int last_start = doc_start(doc_starts, b, T, min(q0 + kTile, T) - 1);
  const int start[2] = {doc_start(doc_starts, b, T, row0 + g), doc_start(doc_starts, b, T, row0 + g + 8)};

  load_tile_async<HS>(q_s, q, ld, q0, T);
  load_tile_async<HS>(k_s, k, ld, kt0 * kTile, T);
  load_tile_async<HS>(v_s, v, ld, kt0 * kTile, T);
  cp_async_commit();
  uint32_t qf[HS / 16][4];
  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max (log2 units), this lane's row sums
  for (int kt = kt0; kt <= qt; kt++) {
    const int stage = (kt - kt0) % 2, k0 = kt * kTile;
    const bool check_docs = k0 < last_start;  // uniform over the block; never without doc_starts
    if (kt < qt) {
      const int next = (kt + 1) * kTile;
      load_tile_async<HS>(k_s + (1 - stage) * S::kElems, k, ld, next, T);
      load_tile_async<HS>(v_s + (1 - stage) * S::kElems, v, ld, next, T);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // stage kt has landed for every thread
    if (kt == kt0) load_a_frags<HS>(qf, q_s, S::kLd, 16 * warp);
    float s[kTile / 8][4] = {};
    mma_abt<HS, kTile>(s, qf, k_s + stage * S::kElems, S::kLd);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kTile / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        // Only the diagonal tile has keys past a row; keys past T lie past every row below T.
        const int key = k0 + 8 * n + 2 * t + e % 2;
        const bool visible =
            (kt < qt || key <= row0 + g + 8 * (e / 2)) && (!check_docs || key >= start[e / 2]);
        s[n][e] = visible ? s[n][e] * scale_log2 : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
      }
    // Without doc_starts key k0 is visible to every row of the tile, so m_new is finite. With them it is
    // -inf while a row's document starts past every key so far; 0 then stands in as the exponents' base,
    // so alpha = p = 0 instead of NaN.
    float alpha[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const float m_new = fmaxf(m[r], quad_max(tile_max[r]));
      base[r] = kDocs && m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = exp2f(m[r] - base[r]);
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < kTile / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        s[n][e] = exp2f(s[n][e] - base[e / 2]);
        l[e / 2] += s[n][e];
      }
#pragma unroll
    for (int n = 0; n < HS / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[n][e] *= alpha[e / 2];
    uint32_t pf[kTile / 16][4];
    to_a_frags<kTile, E>(pf, s);
    mma_ab<kTile, HS>(o, pf, v_s + stage * S::kElems, S::kLd);
    __syncthreads();  // this stage is refilled (with tile kt + 2) next iteration
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] = quad_sum(l[r]);
    inv[r] = 1.0f / l[r];
    const int row = row0 + g + 8 * r;
    if (t == 0 && row < T) lse[(int64_t(b) * NH + h) * T + row] = m[r] * kLn2 + logf(l[r]);
  }
  store_rows<HS>(out + int64_t(b) * T * C + h * HS, C, o, row0, T, inv);
}

// Grid (B NKV, key tiles), first key tile first (it sees the most queries). dk and dv rows of dqkv
// (B,T,(NH+2NKV)HS) for one key tile of one kv head, summing over the group's query heads and, for each,
// the query tiles at or below the diagonal, in order, on transposed scores (this warp's 16 keys as rows,
// a tile's 64 queries as columns):
//   P^T = exp(k q^T scale - lse),  dv = P^T dout,  dS^T = P^T (v dout^T - delta),  dk = scale dS^T q.
// With doc_starts (kDocs) the query tiles stop before the first whose first row's document starts past the
// key tile.
template <typename E, int HS, bool kDocs>
__global__ void __launch_bounds__(kThreads, kDkdvMinBlocks<HS>)
    attention_tc_backward_dkdv_kernel(E* dqkv, const E* dout, const E* qkv, const float* lse,
                                      const float* delta, const int32_t* doc_starts, int T, QkvHeads heads,
                                      float scale) {
  if constexpr (!kDocs) doc_starts = nullptr;
  using S = Tile<HS>;
  extern __shared__ float4 shared_quads[];
  E* k_s = reinterpret_cast<E*>(shared_quads);                    // (kTile, kLd)
  E* v_s = k_s + S::kElems;                                       // (kTile, kLd)
  E* q_s = v_s + S::kElems;                                       // 2 stages of (kTile, kLd)
  E* do_s = q_s + 2 * S::kElems;                                  // 2 stages of (kTile, kLd)
  float* lse_s = reinterpret_cast<float*>(do_s + 2 * S::kElems);  // 2 stages of (kTile), log2 units
  float* delta_s = lse_s + 2 * kTile;                             // 2 stages of (kTile)
  int* start_s = reinterpret_cast<int*>(delta_s + 2 * kTile);     // 2 stages of (kTile); with doc_starts only
  const int warp = int(threadIdx.x) / kWarpSize, g = lane_id() / 4, t = lane_id() % 4;
  const int NH = heads.NH, b = int(blockIdx.x) / heads.NKV, kv = int(blockIdx.x) % heads.NKV, kt = int(blockIdx.y);
  const int C = NH * HS, k0 = kt * kTile, row0 = k0 + 16 * warp, query_tiles = (T + kTile - 1) / kTile;
  const int64_t ld = heads.row_stride();
  const E* qkv_b = qkv + int64_t(b) * T * ld;
  const float scale_log2 = scale * kLog2e;
  // Step i of the loop visits query head kv G + i / n, query tile kt + i % n (G = group, n = the query
  // tiles at or below the diagonal whose rows may see a key of this tile).
  const int tiles_per_head = doc_query_tiles_end(doc_starts, b, T, kTile, kt, query_tiles, k0 + kTile - 1) - kt;
  const int steps = heads.group() * tiles_per_head;
  auto head_of = [&](int step) { return kv * heads.group() + step / tiles_per_head; };
  auto tile_of = [&](int step) { return kt + step % tiles_per_head; };
  // Step i's query tile into stage i % 2: q and dout by cp.async, lse, delta (and document starts) by
  // plain loads (seen by all after the barrier that follows the wait). Rows past T get lse = delta = 0
  // and are masked.
  auto load_query_tile = [&](int step) {
    const int h = head_of(step), q0 = tile_of(step) * kTile, s = step % 2;
    load_tile_async<HS>(q_s + s * S::kElems, qkv_b + heads.q_column(h), ld, q0, T);
    load_tile_async<HS>(do_s + s * S::kElems, dout + int64_t(b) * T * C + h * HS, C, q0, T);
    cp_async_commit();
    if (threadIdx.x < kTile) {
      const int row = q0 + int(threadIdx.x);
      const int64_t at = (int64_t(b) * NH + h) * T + row;
      lse_s[s * kTile + threadIdx.x] = row < T ? lse[at] * kLog2e : 0.0f;
      delta_s[s * kTile + threadIdx.x] = row < T ? delta[at] : 0.0f;
      if (doc_starts != nullptr) start_s[s * kTile + threadIdx.x] = doc_start(doc_starts, b, T, row);
    }
  };

  load_tile_async<HS>(k_s, qkv_b + heads.k_column(kv), ld, k0, T);
  load_tile_async<HS>(v_s, qkv_b + heads.v_column(kv), ld, k0, T);
  load_query_tile(0);
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  for (int step = 0; step < steps; step++) {
    const int qt = tile_of(step), stage = step % 2, q0 = qt * kTile;
    const E* qs = q_s + stage * S::kElems;
    const E* dos = do_s + stage * S::kElems;
    if (step + 1 < steps) {
      load_query_tile(step + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    float p[kTile / 8][4] = {};  // P^T (16 keys, kTile queries)
    mma_abt_shared<HS, kTile>(p, k_s, 16 * warp, qs, S::kLd);
    // Some query's document starts past key k0 (the last valid query's start is the largest).
    const bool check_docs = kDocs && start_s[stage * kTile + min(kTile, T - q0) - 1] > k0;
    const bool masked = qt == kt || q0 + kTile > T || check_docs;  // the diagonal tile, queries past T, documents
#pragma unroll
    for (int n = 0; n < kTile / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int col = 8 * n + 2 * t + e % 2, key = row0 + g + 8 * (e / 2);
        const bool visible = !masked || (q0 + col < T && key <= q0 + col &&
                                         (!check_docs || key >= start_s[stage * kTile + col]));
        p[n][e] = visible ? exp2f(fmaf(p[n][e], scale_log2, -lse_s[stage * kTile + col])) : 0.0f;
      }
    uint32_t pf[kTile / 16][4];
    to_a_frags<kTile, E>(pf, p);
    mma_ab<kTile, HS>(dv, pf, dos, S::kLd);
    float dp[kTile / 8][4] = {};  // (dout v^T)^T
    mma_abt_shared<HS, kTile>(dp, v_s, 16 * warp, dos, S::kLd);
#pragma unroll
    for (int n = 0; n < kTile / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) dp[n][e] = p[n][e] * (dp[n][e] - delta_s[stage * kTile + 8 * n + 2 * t + e % 2]);
    to_a_frags<kTile, E>(pf, dp);
    mma_ab<kTile, HS>(dk, pf, qs, S::kLd);
    __syncthreads();  // this stage is refilled next iteration
  }
  E* dqkv_b = dqkv + int64_t(b) * T * ld;  // dk, dv: (T, HS) each, row stride ld
  store_rows<HS>(dqkv_b + heads.k_column(kv), ld, dk, row0, T, {scale, scale});
  store_rows<HS>(dqkv_b + heads.v_column(kv), ld, dv, row0, T, {1.0f, 1.0f});
}

// Grid (B NH, query tiles), last query tile first. dq rows of dqkv for one query tile, summing
// over the key tiles at or below the diagonal in order: P = exp(q k^T scale - lse), dS = P (dout v^T -
// delta), dq = scale dS k. delta (B,NH,T) = rowsum(dout * out) of its rows is computed first and
// stored for the dk, dv kernel. The key tiles run from kt0 as in the forward (kDocs: with doc_starts).
template <typename E, int HS, bool kDocs>
__global__ void __launch_bounds__(kThreads)
    attention_tc_backward_dq_kernel(E* dqkv, float* delta, const E* dout, const E* out, const E* qkv,
                                    const float* lse, const int32_t* doc_starts, int T, QkvHeads heads,
                                    float scale) {
  if constexpr (!kDocs) doc_starts = nullptr;
  using S = Tile<HS>;
  extern __shared__ float4 shared_quads[];
  E* q_s = reinterpret_cast<E*>(shared_quads);  // (kTile, kLd)
  E* do_s = q_s + S::kElems;                    // (kTile, kLd)
  E* k_s = do_s + S::kElems;                    // 2 stages of (kTile, kLd)
  E* v_s = k_s + 2 * S::kElems;                 // 2 stages of (kTile, kLd)
  const int warp = int(threadIdx.x) / kWarpSize, g = lane_id() / 4, t = lane_id() % 4;
  const int NH = heads.NH, b = int(blockIdx.x) / NH, h = int(blockIdx.x) % NH;
  const int qt = int(gridDim.y) - 1 - int(blockIdx.y), C = NH * HS, q0 = qt * kTile, row0 = q0 + 16 * warp;
  const int64_t ld = heads.row_stride();
  const auto [q, k, v] = head_rows(heads, qkv, b, T, h);  // (T, HS) each, row stride ld
  const float scale_log2 = scale * kLog2e;
  const int kt0 = doc_start(doc_starts, b, T, q0) / kTile;
  const int last_start = doc_start(doc_starts, b, T, min(q0 + kTile, T) - 1);
  const int start[2] = {doc_start(doc_starts, b, T, row0 + g), doc_start(doc_starts, b, T, row0 + g + 8)};

  load_tile_async<HS>(q_s, q, ld, q0, T);
  load_tile_async<HS>(do_s, dout + int64_t(b) * T * C + h * HS, C, q0, T);
  load_tile_async<HS>(k_s, k, ld, kt0 * kTile, T);
  load_tile_async<HS>(v_s, v, ld, kt0 * kTile, T);
  cp_async_commit();
  // Lane (g, t) sums columns [t HS/4, (t + 1) HS/4) of rows g and g + 8 of dout * out, then the quad
  // adds its four parts. Rows past T get finite values and are never stored.
  float row_lse[2], row_delta[2];
  constexpr int kW = kVec<E>, kPart = HS / 4;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + g + 8 * r;
    const int64_t at = (int64_t(b) * T + row) * C + h * HS + t * kPart;  // dout and out (B,T,C)
    float sum = 0.0f;
    if (row < T)
#pragma unroll
      for (int c = 0; c < kPart; c += kW) {
        float x[kW], y[kW];
        load_f32_vec(x, dout + at + c);
        load_f32_vec(y, out + at + c);
#pragma unroll
        for (int e = 0; e < kW; e++) sum = fmaf(x[e], y[e], sum);
      }
    row_delta[r] = quad_sum(sum);
    row_lse[r] = row < T ? lse[(int64_t(b) * NH + h) * T + row] * kLog2e : 0.0f;
    if (t == 0 && row < T) delta[(int64_t(b) * NH + h) * T + row] = row_delta[r];
  }
  float dq[HS / 8][4] = {};
  for (int kt = kt0; kt <= qt; kt++) {
    const int stage = (kt - kt0) % 2, k0 = kt * kTile;
    const bool check_docs = k0 < last_start;  // uniform over the block; never without doc_starts
    const E* ks = k_s + stage * S::kElems;
    const E* vs = v_s + stage * S::kElems;
    if (kt < qt) {
      load_tile_async<HS>(k_s + (1 - stage) * S::kElems, k, ld, k0 + kTile, T);
      load_tile_async<HS>(v_s + (1 - stage) * S::kElems, v, ld, k0 + kTile, T);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    float p[kTile / 8][4] = {};
    mma_abt_shared<HS, kTile>(p, q_s, 16 * warp, ks, S::kLd);
#pragma unroll
    for (int n = 0; n < kTile / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = k0 + 8 * n + 2 * t + e % 2;
        const bool visible =
            (kt < qt || key <= row0 + g + 8 * (e / 2)) && (!check_docs || key >= start[e / 2]);
        p[n][e] = visible ? exp2f(fmaf(p[n][e], scale_log2, -row_lse[e / 2])) : 0.0f;
      }
    float dp[kTile / 8][4] = {};
    mma_abt_shared<HS, kTile>(dp, do_s, 16 * warp, vs, S::kLd);
#pragma unroll
    for (int n = 0; n < kTile / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) dp[n][e] = p[n][e] * (dp[n][e] - row_delta[e / 2]);
    uint32_t dsf[kTile / 16][4];
    to_a_frags<kTile, E>(dsf, dp);
    mma_ab<kTile, HS>(dq, dsf, ks, S::kLd);
    __syncthreads();  // this stage is refilled next iteration
  }
  store_rows<HS>(dqkv + int64_t(b) * T * ld + heads.q_column(h), ld, dq, row0, T, {scale, scale});
}

// --- launch configuration ---

constexpr size_t kElemBytes = 2;  // bf16 and fp16

constexpr size_t forward_shared_bytes(int HS) { return kElemBytes * 5 * kTile * (HS + 8); }
// The dk, dv kernel also keeps its query tiles' document starts when it has doc_starts.
constexpr size_t dkdv_shared_bytes(int HS, bool doc_starts) {
  return kElemBytes * 6 * kTile * (HS + 8) + sizeof(float) * 4 * kTile + (doc_starts ? sizeof(int) * 2 * kTile : 0);
}
constexpr size_t dq_shared_bytes(int HS) { return kElemBytes * 6 * kTile * (HS + 8); }

// Calls f(std::integral_constant<int, HS>{}) for a head size with a kernel.
template <typename F>
void with_head_size(int64_t HS, F&& f) {
  switch (HS) {
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    default: TS_FAIL("tensor-core attention: no kernel for head size ", HS, " (32, 64, 128)");
  }
}

void check_launch(const char* op, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                  std::initializer_list<const void*> pointers) {
  TS_CHECK(NH > 0 && C % NH == 0, op, ": ", NH, " heads do not split C = ", C, " channels evenly");
  TS_CHECK(NKV > 0 && NH % NKV == 0, op, ": ", NKV, " kv heads do not divide ", NH, " query heads");
  TS_CHECK(attention_tc_supported(C / NH, pointers), op, ": head size ", C / NH,
           ", these pointers or this device are not covered by the tensor-core kernels; check "
           "attention_tc_supported first and use the CUDA-core attention otherwise");
  TS_CHECK(B * NH <= INT32_MAX && ceil_div(T, kTile) <= 65535, op, ": B = ", B, ", NH = ", NH, ", T = ", T,
           " exceed the kernel's grid (B NH < 2^31, T <= ", 65535 * kTile, ")");
}

}  // namespace

// --- launchers ---

bool attention_tc_supported(int64_t HS, std::initializer_list<const void*> pointers) {
  return (HS == 32 || HS == 64 || HS == 128) && aligned16_on_sm80(pointers);
}

template <typename E>
void attention_tc_forward(E* out, float* lse, const E* qkv, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                          const int32_t* doc_starts, cudaStream_t stream) {
  check_launch("attention_tc_forward", B, T, C, NH, NKV, {out, lse, qkv});
  if (B == 0 || T == 0) return;
  const QkvHeads heads{int(NH), int(NKV), int(C / NH)};
  const float scale_log2 = kLog2e / std::sqrt(float(heads.HS));
  const dim3 grid(unsigned(B * NH), unsigned(ceil_div(T, kTile)));  // tiles vary slowest: heavy ones first
  with_head_size(heads.HS, [&](auto hs) {
    with_doc_mask(doc_starts, [&](auto docs) {
      constexpr int kHS = decltype(hs)::value;
      constexpr bool kDocs = decltype(docs)::value;
      launch_with_shared(attention_tc_forward_kernel<E, kHS, kDocs>, grid, kThreads, forward_shared_bytes(kHS),
                         stream, out, lse, qkv, doc_starts, int(T), heads, scale_log2);
    });
  });
}

template <typename E>
void attention_tc_backward(E* dqkv, const E* dout, const E* qkv, const E* out, const float* lse, int64_t B, int64_t T,
                           int64_t C, int64_t NH, int64_t NKV, const int32_t* doc_starts, cudaStream_t stream) {
  check_launch("attention_tc_backward", B, T, C, NH, NKV, {dqkv, dout, qkv, out, lse});
  if (B == 0 || T == 0) return;
  const QkvHeads heads{int(NH), int(NKV), int(C / NH)};
  const float scale = 1.0f / std::sqrt(float(heads.HS));
  const DeviceScratch delta_buffer(size_t(B * NH * T) * sizeof(float));
  float* delta = delta_buffer.as<float>();  // (B,NH,T), written by the dq kernel
  const unsigned tiles = unsigned(ceil_div(T, kTile));  // tiles vary slowest: heavy ones first
  with_head_size(heads.HS, [&](auto hs) {
    with_doc_mask(doc_starts, [&](auto docs) {
      constexpr int kHS = decltype(hs)::value;
      constexpr bool kDocs = decltype(docs)::value;
      // The two kernels write disjoint parts of dqkv (dq, then dk and dv), every row from one block only.
      launch_with_shared(attention_tc_backward_dq_kernel<E, kHS, kDocs>, dim3(unsigned(B * NH), tiles), kThreads,
                         dq_shared_bytes(kHS), stream, dqkv, delta, dout, out, qkv, lse, doc_starts, int(T), heads,
                         scale);
      launch_with_shared(attention_tc_backward_dkdv_kernel<E, kHS, kDocs>, dim3(unsigned(B * NKV), tiles), kThreads,
                         dkdv_shared_bytes(kHS, kDocs), stream, dqkv, dout, qkv, lse,
                         static_cast<const float*>(delta), doc_starts, int(T), heads, scale);
    });
  });
}

#define INSTANTIATE(E)                                                                                            \
  template void attention_tc_forward<E>(E*, float*, const E*, int64_t, int64_t, int64_t, int64_t, int64_t,       \
                                        const int32_t*, cudaStream_t);                                             \
  template void attention_tc_backward<E>(E*, const E*, const E*, const E*, const float*, int64_t, int64_t, int64_t, \
                                         int64_t, int64_t, const int32_t*, cudaStream_t);
INSTANTIATE(__nv_bfloat16)
INSTANTIATE(__half)

}  // namespace tessera::cuda
