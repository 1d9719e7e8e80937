// Deterministic column sums of a row-major (N,C) operand for parameter gradients (LayerNorm's
// dweight/dbias, the linear layer's dbias): out_k[c] += sum_n load(n, c)[k] for K outputs. A kernel
// that already reads the rows may write the partials itself and call column_sums_finish; a plain
// matrix in memory (the bias gradient's dout) takes matrix_column_sums_accumulate, 16 bytes a load.
// Pass 1: a grid of (C/32 column tiles, C/(32 W) for a plain matrix's W-wide loads) x (R row chunks),
// R fixed by N alone; each block sums its chunk into partial (K,R,C). Pass 2: a block per 32 columns
// adds the R partials in a fixed order (32 strided runs, one a warp, then their sums). No atomics, so
// the result is the same on every run and device.
#pragma once

#include <algorithm>

#include "core/cuda/device.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {

constexpr int kColumnTile = 32;  // columns per block: one warp reads 128 contiguous bytes of a row
constexpr int kColumnRows = 8;   // warps per block, each on its own rows
constexpr int kFinalRows = 32;   // pass 2's warps: each adds every 32nd partial, loads in flight
constexpr int64_t kMaxRowChunks = 64;
constexpr int64_t kMaxMatrixRowChunks = 256;  // a plain matrix's: 768 blocks for a 768-wide bf16 dout

template <int K>
struct ColumnOutputs {
  float* out[K];
};

// Row 0 of a block adds the Rows sums of its column in `tile` in order; the block has synced.
template <int K, int Rows>
__device__ void add_tile_rows(float (&tile)[K][Rows][kColumnTile + 1], float (&sums)[K]) {
#pragma unroll
  for (int k = 0; k < K; k++) {
    sums[k] = 0.0f;
    for (int r = 0; r < Rows; r++) sums[k] += tile[k][r][threadIdx.x];
  }
}

// partial (K,R,C); `load(n, c, v)` fills v[0..K) with the values of element (n, c).
template <int K, typename Load>
__global__ void column_sums_partial_kernel(float* partial, int64_t N, int64_t C, int64_t rows_per_chunk, Load load) {
  __shared__ float tile[K][kColumnRows][kColumnTile + 1];
  const int64_t c = int64_t(blockIdx.x) * kColumnTile + threadIdx.x;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < N ? begin + rows_per_chunk : N;
  float acc[K] = {};
  if (c < C) {
    for (int64_t n = begin + threadIdx.y; n < end; n += kColumnRows) {
      float v[K];
      load(n, c, v);
#pragma unroll
      for (int k = 0; k < K; k++) acc[k] += v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < K; k++) tile[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float sums[K];
  add_tile_rows(tile, sums);
#pragma unroll
  for (int k = 0; k < K; k++) partial[(int64_t(k) * gridDim.y + blockIdx.y) * C + c] = sums[k];
}

// A block per kColumnTile columns: row y of the block adds partials y, y + kFinalRows, ... in order,
// then row 0 adds the kFinalRows sums in order (a fixed order, so still the same bits on every run).
// 32 rows, not 8: LayerNorm's fused backward leaves 512 partials a column, which 8 rows of loads, one
// after another, took 9.7 us to add (GPT-2 124M, B=16, H200).
template <int K>
__global__ void __launch_bounds__(kColumnTile * kFinalRows)
    column_sums_final_kernel(ColumnOutputs<K> outs, const float* partial, int64_t R, int64_t C) {
  __shared__ float tile[K][kFinalRows][kColumnTile + 1];
  const int64_t c = int64_t(blockIdx.x) * kColumnTile + threadIdx.x;
#pragma unroll
  for (int k = 0; k < K; k++) {
    float sum = 0.0f;
    if (c < C) {
#pragma unroll 4
      for (int64_t r = threadIdx.y; r < R; r += kFinalRows) sum += partial[(int64_t(k) * R + r) * C + c];
    }
    tile[k][threadIdx.y][threadIdx.x] = sum;
  }
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float sums[K];
  add_tile_rows(tile, sums);
#pragma unroll
  for (int k = 0; k < K; k++) outs.out[k][c] += sums[k];
}

// Pass 2 alone, for a kernel that wrote the partials (K,R,C) itself: outs += their sums over R.
template <int K>
void column_sums_finish(ColumnOutputs<K> outs, const float* partial, int64_t R, int64_t C, cudaStream_t stream) {
  column_sums_final_kernel<K><<<unsigned(ceil_div(C, kColumnTile)), dim3(kColumnTile, kFinalRows), 0, stream>>>(
      outs, partial, R, C);
  CUDA_CHECK_LAUNCH();
}

// Queues both passes on `stream`; the partials live in allocator scratch.
template <int K, typename Load>
void column_sums_accumulate(ColumnOutputs<K> outs, int64_t N, int64_t C, Load load, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  const int64_t R = std::min(kMaxRowChunks, ceil_div(N, 4 * kColumnRows));
  const int64_t rows_per_chunk = ceil_div(N, R);
  const DeviceScratch partial(size_t(K * R * C) * sizeof(float));
  const dim3 grid(unsigned(ceil_div(C, kColumnTile)), unsigned(R));
  column_sums_partial_kernel<K><<<grid, dim3(kColumnTile, kColumnRows), 0, stream>>>(partial.as<float>(), N, C,
                                                                                     rows_per_chunk, load);
  CUDA_CHECK_LAUNCH();
  column_sums_finish<K>(outs, partial.as<float>(), R, C, stream);
}

// Pass 1 over a plain row-major (N,C) matrix x in T: thread x of a block sums W adjacent columns with
// one W-wide load a row (W = kVec<T> needs x 16-byte aligned and C a multiple of W; W = 1 needs
// nothing), so a block covers kColumnTile * W columns; rows and warps are added in the order above.
template <int W, typename T>
__global__ void matrix_column_sums_partial_kernel(float* partial, const T* x, int64_t N, int64_t C,
                                                  int64_t rows_per_chunk) {
  constexpr int kTileColumns = kColumnTile * W;
  __shared__ float tile[kColumnRows][kTileColumns + 1];
  const int64_t first = int64_t(blockIdx.x) * kTileColumns;
  const int64_t c = first + int64_t(threadIdx.x) * W;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < N ? begin + rows_per_chunk : N;
  float acc[W] = {};
  if (c < C) {
#pragma unroll 4
    for (int64_t n = begin + threadIdx.y; n < end; n += kColumnRows) {
      float v[W];
      load_f32_vec<W>(v, x + n * C + c);
#pragma unroll
      for (int k = 0; k < W; k++) acc[k] += v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < W; k++) tile[threadIdx.y][threadIdx.x * W + k] = acc[k];
  __syncthreads();
  for (int j = threadIdx.y * kColumnTile + threadIdx.x; j < kTileColumns; j += kColumnTile * kColumnRows) {
    if (first + j >= C) break;
    float sum = 0.0f;
    for (int r = 0; r < kColumnRows; r++) sum += tile[r][j];
    partial[int64_t(blockIdx.y) * C + first + j] = sum;
  }
}

// out[c] += sum_n x[n, c] for a plain row-major (N,C) matrix in T, both passes queued on `stream`;
// 16-byte loads where x's alignment and C allow, the same row chunks (so the same bits) either way.
template <typename T>
void matrix_column_sums_accumulate(float* out, const T* x, int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  const int64_t R = std::min(kMaxMatrixRowChunks, ceil_div(N, 4 * kColumnRows));
  const int64_t rows_per_chunk = ceil_div(N, R);
  const DeviceScratch partial(size_t(R * C) * sizeof(float));
  const auto pass1 = [&]<int W>() {
    const dim3 grid(unsigned(ceil_div(C, kColumnTile * W)), unsigned(R));
    matrix_column_sums_partial_kernel<W, T><<<grid, dim3(kColumnTile, kColumnRows), 0, stream>>>(
        partial.as<float>(), x, N, C, rows_per_chunk);
    CUDA_CHECK_LAUNCH();
  };
  if (is_aligned16(x) && C % kVec<T> == 0) pass1.template operator()<kVec<T>>();
  else pass1.template operator()<1>();
  column_sums_finish<1>(ColumnOutputs<1>{{out}}, partial.as<float>(), R, C, stream);
}

}  // namespace tessera::cuda
