// Pieces the causal-attention implementations share (attention.cu on CUDA cores, attention_tc.cu on
// tensor cores, attention_cudnn.cu through cuDNN): where a head's q, k and v columns sit in the packed
// qkv, the document starts of packed sequences, the launch of a kernel that needs more than 48 KB of
// dynamic shared memory, and the 16-bit kernels' pointer and device requirement. Included by .cu files only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {

// True when every pointer is 16-byte aligned and the current device has compute capability 8.0 or newer:
// what the 16-bit attention kernels (tensor-core and cuDNN) need beyond their head sizes.
inline bool aligned16_on_sm80(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (!is_aligned16(p)) return false;
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 8;
}

// The packed qkv (B, T, (NH + 2 NKV) HS): NH query heads, then NKV key heads, then NKV value heads.
// Query head h shares kv head h / (NH / NKV) with the other query heads of its group (NKV = NH is
// multi-head attention, NKV < NH grouped-query attention).
struct QkvHeads {
  int NH, NKV, HS;
  __host__ __device__ int64_t row_stride() const { return int64_t(NH + 2 * NKV) * HS; }
  __host__ __device__ int group() const { return NH / NKV; }
  __device__ int kv_head(int h) const { return h / group(); }
  __device__ int64_t q_column(int h) const { return int64_t(h) * HS; }
  __device__ int64_t k_column(int kv) const { return int64_t(NH + kv) * HS; }
  __device__ int64_t v_column(int kv) const { return int64_t(NH + NKV + kv) * HS; }
};

// Query head h's q rows and its kv head's k and v rows in batch b of qkv: (T, HS) each, row stride
// heads.row_stride().
template <typename E>
struct HeadRows {
  const E *q, *k, *v;
};
template <typename E>
__device__ inline HeadRows<E> head_rows(const QkvHeads& heads, const E* qkv, int b, int T, int h) {
  const E* base = qkv + int64_t(b) * T * heads.row_stride();
  const int kv = heads.kv_head(h);
  return {base + heads.q_column(h), base + heads.k_column(kv), base + heads.v_column(kv)};
}

// Document masking (packed sequences): doc_starts (B,T) i32, null for plain causal attention, holds each
// token's document start, so query t sees keys [doc_starts[b,t], t]; in each sequence the starts are
// non-decreasing and doc_starts[b,t] <= t (ops/attention.h).
// Token `row`'s document start in sequence b: 0 when doc_starts is null or row is at or past T.
__device__ inline int doc_start(const int32_t* doc_starts, int b, int T, int row) {
  return doc_starts != nullptr && row < T ? doc_starts[int64_t(b) * T + row] : 0;
}
// The end of the query tiles [first, tiles) of `tile` rows that can see key `last_key`: a tile whose first
// row's document starts past the key is followed only by tiles whose every row's does (the starts are
// non-decreasing), so they form a prefix, found by binary search. `tiles` when doc_starts is null.
__device__ inline int doc_query_tiles_end(const int32_t* doc_starts, int b, int T, int tile, int first, int tiles,
                                          int last_key) {
  if (doc_starts == nullptr) return tiles;
  int lo = first, hi = tiles;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (doc_starts[int64_t(b) * T + int64_t(mid) * tile] <= last_key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
// Calls f(std::bool_constant<doc_starts != nullptr>{}). Kernels take it as a template flag: those without
// document masks compile to the plain causal code (the mask code folds away), with its registers and speed.
template <typename F>
void with_doc_mask(const int32_t* doc_starts, F&& f) {
  if (doc_starts != nullptr) return f(std::true_type{});
  f(std::false_type{});
}

}  // namespace tessera::cuda
