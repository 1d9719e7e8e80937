// Token + position embedding on the GPU, storage S = float, bf16 or fp16 for out/dout/wte/wpe (S, not T:
// T is the sequence length here), fp32 arithmetic, parameter gradients fp32:
//   forward:  out[b,t,c] = wte[tokens[b,t],c] + wpe[t,c] (wpe null: no position table), W channels
//             per thread (16 bytes when C and the pointers allow, else 1).
//   backward: dwpe[t,c] += sum_b dout[b,t,c]   one thread per (t,c), b in order (skipped when null).
//             dwte[v,c] += dout[b,t,c] over the (b,t) with tokens[b,t] = v: the rows are bucketed
//             by token id on the host (counting sort, ascending (b,t) within a token), then one
//             block per distinct token adds its rows onto dwte in that order, one thread per c.
// No atomics: both gradients are the same bits on every run; dwte adds in the CPU's order.
#include <algorithm>
#include <vector>

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

// Block u: token ids[u], whose rows of dout are rows[starts[u] .. starts[u+1]).
template <typename S>
__global__ void encoder_backward_wte_kernel(float* dwte, const S* dout, const int32_t* rows, const int32_t* starts,
                                            const int32_t* ids, int64_t C) {
  const int64_t u = blockIdx.x;
  const int32_t begin = starts[u], end = starts[u + 1];
  float* dwte_row = dwte + int64_t(ids[u]) * C;  // (C)
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dwte_row[c];
    for (int32_t j = begin; j < end; j++) acc += load_f32(dout[int64_t(rows[j]) * C + c]);
    dwte_row[c] = acc;
  }
}

// --- host side of the launchers ---

// The rows 0..BT of dout whose token lies in [first, first + rows), grouped by token, as one int32
// array [rows (R) | starts (U+1) | ids (U)] for the U distinct tokens (ids relative to first),
// ascending; within a token the rows keep their order. R and U come back through the pointers.
std::vector<int32_t> token_buckets(const int32_t* tokens, int64_t BT, int64_t first, int64_t rows, int64_t* kept,
                                   int64_t* distinct) {
  std::vector<int32_t> local(static_cast<size_t>(BT));
  int32_t max_id = -1;
  int64_t R = 0;
  for (int64_t bt = 0; bt < BT; bt++) {
    const int64_t row = int64_t(tokens[bt]) - first;
    local[size_t(bt)] = row >= 0 && row < rows ? int32_t(row) : -1;
    max_id = std::max(max_id, local[size_t(bt)]);
    R += local[size_t(bt)] >= 0;
  }
  std::vector<int32_t> next(size_t(max_id) + 2, 0);  // counts, then the next free slot per id
  for (int64_t bt = 0; bt < BT; bt++)
    if (local[size_t(bt)] >= 0) next[size_t(local[size_t(bt)]) + 1]++;
  int64_t U = 0;
  for (size_t v = 1; v < next.size(); v++) U += next[v] > 0;
  std::vector<int32_t> plan(size_t(R + 2 * U + 1));
  int32_t* starts = plan.data() + R;
  int32_t* ids = starts + U + 1;
  int64_t u = 0;
  for (int32_t v = 0; v <= max_id; v++) {
    const int32_t count = next[size_t(v) + 1];
    next[size_t(v) + 1] += next[size_t(v)];  // prefix sum: next[v] is now the first slot of id v
    if (count == 0) continue;
    starts[u] = next[size_t(v)];
    ids[u++] = v;
  }
  starts[U] = int32_t(R);
  for (int64_t bt = 0; bt < BT; bt++)
    if (local[size_t(bt)] >= 0) plan[size_t(next[size_t(local[size_t(bt)])]++)] = int32_t(bt);
  *kept = R;
  *distinct = U;
  return plan;
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
void encoder_backward(float* dwte, float* dwpe, const S* dout, const int32_t* tokens_host, int64_t B,
                      int64_t T, int64_t C, int64_t first, int64_t rows, cudaStream_t stream) {
  const int64_t BT = B * T;
  if (BT * C == 0) return;
  if (dwpe) {
    encoder_backward_wpe_kernel<S><<<unsigned(ceil_div(T * C, kBlock)), kBlock, 0, stream>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
  }
  int64_t R = 0, U = 0;
  const std::vector<int32_t> plan = token_buckets(tokens_host, BT, first, rows, &R, &U);
  if (U == 0) return;  // no token of this slice of the vocabulary
  const DeviceScratch plan_device(plan.size() * sizeof(int32_t));
  copy_to_device(plan_device.as<void>(), plan.data(), plan.size() * sizeof(int32_t));  // synchronous
  const int32_t* bucketed = plan_device.as<int32_t>();
  encoder_backward_wte_kernel<S><<<unsigned(U), kBlock, 0, stream>>>(dwte, dout, bucketed, bucketed + R,
                                                                     bucketed + R + U + 1, C);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(S)                                                                                          \
  template void encoder_forward<S>(S*, const int32_t*, const S*, const S*, int64_t, int64_t, int64_t, int64_t,      \
                                   int64_t, cudaStream_t);                                                       \
  template void encoder_backward<S>(float*, float*, const S*, const int32_t*, int64_t, int64_t, int64_t, int64_t,   \
                                    int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
