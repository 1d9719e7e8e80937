// Launch geometry of the row-wise kernels (LayerNorm, RMSNorm): one warp per row, kRowsPerBlock
// rows per block; each lane takes kRowVec<T> consecutive channels at a time on the 16-byte path
// (8 for bf16 and fp16; 1 for fp32, whose rows keep the scalar summation order and so their
// bits), which rows take when C and every pointer allow (vector_rows); and the row sums and fused
// residual add the norms share. Included by .cu files only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {

constexpr int kRowsPerBlock = 8;
constexpr unsigned kRowThreads = kRowsPerBlock * kWarpSize;

template <typename T>
constexpr int kRowVec = std::is_same_v<T, float> ? 1 : kVec<T>;

// The row this thread's warp takes (past N for the last block's idle warps).
__device__ __forceinline__ int64_t warp_row() { return int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize; }

// Whether rows of C channels take the kRowVec<T> path: C a multiple of it, every pointer 16-byte
// aligned (row n starts n*C elements in).
template <typename T>
bool vector_rows(int64_t C, std::initializer_list<const void*> pointers) {
  bool ok = C % kRowVec<T> == 0;
  for (const void* p : pointers) ok = ok && is_aligned16(p);
  return ok;
}

inline unsigned row_blocks(int64_t N) { return unsigned(ceil_div(N, kRowsPerBlock)); }

// This lane's sum of f(x) over its share of the C channels of row x_n: the start of a norm's
// statistics.
template <int W, typename T, typename F>
__device__ __forceinline__ float row_lane_sum(const T* x_n, int64_t C, F f) {
  const int lane = threadIdx.x % kWarpSize;
  float sum = 0.0f;
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float v[W];
    load_f32_vec(v, x_n + c);
#pragma unroll
    for (int k = 0; k < W; k++) sum += f(v[k]);
  }
  return sum;
}

// The fused residual of a norm: r_n = a_n + b_n (C channels, this lane's share), rounded to T and
// stored; returns the lane's sum of f(r) over the stored (rounded) values, which the norm's
// statistics start from. Each lane reads back only what it wrote: no barrier before the next pass.
template <typename T, int W, typename F>
__device__ __forceinline__ float add_row_rounded(T* r_n, const T* a_n, const T* b_n, int64_t C, F f) {
  const int lane = threadIdx.x % kWarpSize;
  float sum = 0.0f;
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float va[W], vb[W];
    load_f32_vec(va, a_n + c);
    load_f32_vec(vb, b_n + c);
#pragma unroll
    for (int k = 0; k < W; k++) va[k] += vb[k];
    store_f32_vec(r_n + c, va);
#pragma unroll
    for (int k = 0; k < W; k++) sum += f(load_f32(store_as<T>(va[k])));
  }
  return sum;
}

}  // namespace tessera::cuda
