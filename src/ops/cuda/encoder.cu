// Token + position embedding on the GPU, storage S = float, bf16 or fp16 for out/dout/wte/wpe (S, not T:
// T is the sequence length here), fp32 arithmetic, parameter gradients fp32:
//   forward:  out[b,t,c] = wte[tokens[b,t],c] + wpe[t,c] (wpe null: no position table), W channels
//             per thread (16 bytes when C and the pointers allow, else 1).
//   backward: dwpe[t,c] += sum_b dout[b,t,c]   one thread per (t,c), b in order (skipped when null).
//             dwte[v,c] += dout[b,t,c] over the (b,t) with tokens[b,t] = v: the positions are sorted
//             by token on the device (CUB's radix sort, stable: ascending (b,t) within a token), then
//             the block at the first position of each token adds its rows onto dwte in that order,
//             one thread per c. Nothing goes through the host, so the step does not wait here.
// No atomics: both gradients are the same bits on every run; dwte adds in the CPU's order.
#include <bit>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "core/cuda/device.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/encoder_cuda.h"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

// Elements [i, i + W) of one row, i = thread index * W (C is a multiple of W).
template <typename S, int W>
__global__ void encoder_forward_kernel(S* out, const int32_t* tokens, const S* wte, const S* wpe, int64_t BT,
                                       int64_t T, int64_t C, int64_t first, int64_t rows) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C, t = bt % T, row = int64_t(tokens[bt]) - first;
  float e[W], p[W];
  if (row >= 0 && row < rows) {
    load_f32_vec(e, wte + row * C + c);
  } else {  // another rank's slice of the vocabulary
#pragma unroll
    for (int k = 0; k < W; k++) e[k] = 0.0f;
  }
  if (wpe) {
    load_f32_vec(p, wpe + t * C + c);
#pragma unroll
    for (int k = 0; k < W; k++) e[k] += p[k];
  }
  store_f32_vec(out + i, e);
}

template <typename S>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const S* dout, int64_t B, int64_t T, int64_t C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // t * C + c
  if (i >= T * C) return;
  float sum = 0.0f;
  for (int64_t b = 0; b < B; b++) sum += load_f32(dout[b * T * C + i]);
  dwpe[i] += sum;
}

// The sort's keys: each position's row in the slice, or `rows` (sorted last, never summed) for a token
// of another slice; and the positions 0..BT, which the sort carries along.
__global__ void slice_rows_kernel(int32_t* rows_of, int32_t* positions, const int32_t* tokens, int64_t BT,
                                  int64_t first, int64_t rows) {
  const int64_t bt = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (bt >= BT) return;
  const int64_t row = int64_t(tokens[bt]) - first;
  rows_of[bt] = row >= 0 && row < rows ? int32_t(row) : int32_t(rows);
  positions[bt] = int32_t(bt);
}

// Block i: when sorted position i is the first of its row (and the row is in the slice), adds that
// row's positions of dout, in their sorted order, onto the row of dwte; every other block returns.
template <typename S>
__global__ void encoder_backward_wte_kernel(float* dwte, const S* dout, const int32_t* sorted_rows,
                                            const int32_t* sorted_positions, int64_t BT, int64_t C, int64_t rows) {
  const int64_t i = blockIdx.x;
  const int32_t row = sorted_rows[i];
  if (row == rows || (i > 0 && sorted_rows[i - 1] == row)) return;
  float* dwte_row = dwte + int64_t(row) * C;  // (C)
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dwte_row[c];
    for (int64_t j = i; j < BT && sorted_rows[j] == row; j++)
      acc += load_f32(dout[int64_t(sorted_positions[j]) * C + c]);
    dwte_row[c] = acc;
  }
}

}  // namespace

// --- launchers ---

template <typename S>
void encoder_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int64_t B, int64_t T,
                     int64_t C, int64_t first, int64_t rows, cudaStream_t stream) {
  const int64_t n = B * T * C;
  if (n == 0) return;
  constexpr int W = kVec<S>;
  if (C % W == 0 && is_aligned16(out) && is_aligned16(wte) && (!wpe || is_aligned16(wpe)))
    encoder_forward_kernel<S, W><<<unsigned(ceil_div(n / W, kBlock)), kBlock, 0, stream>>>(out, tokens, wte, wpe,
                                                                                          B * T, T, C, first, rows);
  else
    encoder_forward_kernel<S, 1><<<unsigned(ceil_div(n, kBlock)), kBlock, 0, stream>>>(out, tokens, wte, wpe, B * T,
                                                                                      T, C, first, rows);
  CUDA_CHECK_LAUNCH();
}

template <typename S>
void encoder_backward(float* dwte, float* dwpe, const S* dout, const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                      int64_t first, int64_t rows, cudaStream_t stream) {
  const int64_t BT = B * T;
  if (BT * C == 0) return;
  TS_CHECK(BT <= INT32_MAX && rows <= INT32_MAX, "encoder_backward: ", BT, " positions or ", rows,
           " rows of dwte exceed the sort's 32-bit keys and positions");
  if (dwpe) {
    encoder_backward_wpe_kernel<S><<<unsigned(ceil_div(T * C, kBlock)), kBlock, 0, stream>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
  }
  // Four int32 arrays of BT (keys and positions, before and after the sort), then CUB's scratch.
  const int n = int(BT);
  const int end_bit = int(std::bit_width(uint32_t(rows)));  // the keys lie in [0, rows]
  size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), n, 0, end_bit, stream));
  const size_t array_bytes = size_t(ceil_div(BT * int64_t(sizeof(int32_t)), 256) * 256);
  const DeviceScratch scratch(4 * array_bytes + sort_bytes);
  char* base = scratch.as<char>();
  const auto array = [&](int k) { return reinterpret_cast<int32_t*>(base + k * array_bytes); };
  slice_rows_kernel<<<unsigned(ceil_div(BT, kBlock)), kBlock, 0, stream>>>(array(0), array(1), tokens, BT, first,
                                                                           rows);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + 4 * array_bytes, sort_bytes, array(0), array(2), array(1),
                                             array(3), n, 0, end_bit, stream));
  encoder_backward_wte_kernel<S><<<unsigned(BT), kBlock, 0, stream>>>(dwte, dout, array(2), array(3), BT, C, rows);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(S)                                                                                          \
  template void encoder_forward<S>(S*, const int32_t*, const S*, const S*, int64_t, int64_t, int64_t, int64_t,      \
                                   int64_t, cudaStream_t);                                                       \
  template void encoder_backward<S>(float*, float*, const S*, const int32_t*, int64_t, int64_t, int64_t, int64_t,   \
                                    int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
