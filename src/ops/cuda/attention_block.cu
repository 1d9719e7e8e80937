// Attention blocks on the GPU (ring attention's steps), on CUDA cores with fp32 arithmetic. Query row
// i sees the kv block's keys at positions <= its own and, with document starts, >= its document's start:
// a run of the block's keys, found by binary search (possibly empty).
//   forward: a block per (b, query head, query row) attends over the visible keys (row_attention.cuh)
//            and merges the result into the running out and lse.
//   backward: dq by a block per (b, query head, query row) over its visible keys; dk and dv by a block
//            per (b, kv head, key) over the group's query heads and the rows that see the key. Each
//            block's warps take interleaved items and merge in warp order: deterministic, no atomics.
#include "core/error.h"
#include "ops/cuda/attention_block_cuda.h"
#include "ops/cuda/row_attention.cuh"

namespace tessera::cuda {
namespace {

static_assert(kMaxBlockHeadSize <= kRowMaxHeadSize);

// The number of entries of the non-decreasing array a (n) below `value`, or at most `value` when inclusive.
__device__ int64_t count_before(const int32_t* a, int64_t n, int32_t value, bool inclusive) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (a[mid] < value || (inclusive && a[mid] == value)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// The kv block's keys query row i of sequence b sees: [begin, end), empty when begin >= end (a document
// that starts past the row's last key in the block, or a row before the block's first key).
struct KeyRange {
  int64_t begin, end;
  __device__ int64_t size() const { return end > begin ? end - begin : 0; }
};
__device__ KeyRange visible_keys(const BlockShape& s, int64_t b, int64_t i) {
  const int64_t end = count_before(s.kv_pos, s.Tk, s.q_pos[i], true);
  if (s.q_doc_starts == nullptr) return {0, end};
  return {count_before(s.kv_pos, s.Tk, s.q_doc_starts[b * s.Tq + i], false), end};
}

// Per-warp partial HS-element rows, for sum_warps.
struct WarpRows {
  float rows[kRowWarps][kRowMaxHeadSize];
};

// The lanes' acc (kRowPerLane elements each) of every warp summed into the block; returns element i's
// sum for threads i < HS (others get 0). Starts and ends with a barrier.
__device__ float sum_warps(WarpRows& shared, const float (&acc)[kRowPerLane], int64_t HS, int64_t i) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRowPerLane; ++r) {
    const int64_t e = lane + r * kWarpSize;
    if (e < HS) shared.rows[warp][e] = acc[r];
  }
  __syncthreads();
  float total = 0.0f;
  if (i < HS)
    for (int w = 0; w < kRowWarps; ++w) total += shared.rows[w][i];
  __syncthreads();
  return total;
}

// --- kernels ---

template <typename T>
__global__ void __launch_bounds__(kRowWarps* kWarpSize)
    block_forward_kernel(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ qkv,
                         const float* __restrict__ kv, BlockShape s, float scale, bool first) {
  __shared__ RowAttention row;
  const int64_t i = blockIdx.x % s.Tq, h = (blockIdx.x / s.Tq) % s.NH, b = blockIdx.x / (s.Tq * s.NH);
  const int64_t g = h / (s.NH / s.NKV), W = (s.NH + 2 * s.NKV) * s.HS, KV = 2 * s.NKV * s.HS;
  const KeyRange keys = visible_keys(s, b, i);
  const float* k = kv + (b * s.Tk + keys.begin) * KV + g * s.HS;
  attend_row(row, qkv + (b * s.Tq + i) * W + h * s.HS, k, k + s.NKV * s.HS, KV, keys.size(), s.HS, scale);
  // Merge into the running row; on the first block the running row is empty (out is not read). A row
  // that saw no key of the block (row.lse = -inf) keeps its running values: keep = 1, take = 0.
  T* o = out + (b * s.Tq + i) * s.NH * s.HS + h * s.HS;
  float* l = lse + (b * s.NH + h) * s.Tq + i;
  const float old = first ? -INFINITY : *l, blk = row.lse;
  const float shift = fmaxf(old, blk);
  const bool none = shift == -INFINITY;  // no key seen so far, nor in this block
  const float merged = none ? -INFINITY : shift + logf(__expf(old - shift) + __expf(blk - shift));
  const float keep = none ? 0.0f : __expf(old - merged), take = none ? 0.0f : __expf(blk - merged);
  for (int64_t e = threadIdx.x; e < s.HS; e += blockDim.x) {
    const float before = first ? 0.0f : load_f32(o[e]);
    o[e] = store_as<T>(keep * before + take * row.out[e]);
  }
  __syncthreads();  // every thread read *l (through `first`'s branch) before it changes
  if (threadIdx.x == 0) *l = merged;
}

// One warp per (b, t, h) row: D = sum of dout * out over the head's HS channels.
template <typename T>
__global__ void block_delta_kernel(float* __restrict__ delta, const T* __restrict__ dout, const T* __restrict__ out,
                                   int64_t B, int64_t T_, int64_t NH, int64_t HS) {
  const int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarpSize;
  if (row >= B * T_ * NH) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t h = row % NH, bt = row / NH, b = bt / T_, t = bt % T_;
  const int64_t at = bt * NH * HS + h * HS;
  float sum = 0.0f;
  for (int64_t e = lane; e < HS; e += kWarpSize) sum += load_f32(dout[at + e]) * load_f32(out[at + e]);
  sum = warp_sum(sum);
  if (lane == 0) delta[(b * NH + h) * T_ + t] = sum;
}

template <typename T>
__global__ void __launch_bounds__(kRowWarps* kWarpSize)
    block_dq_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
                    const float* __restrict__ kv, const float* __restrict__ lse, const float* __restrict__ delta,
                    BlockShape s, float scale) {
  __shared__ WarpRows partial;
  const int64_t i = blockIdx.x % s.Tq, h = (blockIdx.x / s.Tq) % s.NH, b = blockIdx.x / (s.Tq * s.NH);
  const int64_t g = h / (s.NH / s.NKV), W = (s.NH + 2 * s.NKV) * s.HS, KV = 2 * s.NKV * s.HS;
  const KeyRange keys = visible_keys(s, b, i);
  const int64_t bhi = (b * s.NH + h) * s.Tq + i;
  const float row_lse = lse[bhi], row_delta = delta[bhi];
  float q[kRowPerLane], o_grad[kRowPerLane], acc[kRowPerLane] = {};
  load_lane_row(q, qkv + (b * s.Tq + i) * W + h * s.HS, s.HS, scale);
  load_lane_row(o_grad, dout + (b * s.Tq + i) * s.NH * s.HS + h * s.HS, s.HS, 1.0f);
  const float* k = kv + b * s.Tk * KV + g * s.HS;
  for (int64_t j = keys.begin + threadIdx.x / kWarpSize; j < keys.end; j += kRowWarps) {
    const float p = __expf(warp_dot(q, k + j * KV, s.HS) - row_lse);
    const float ds = p * (warp_dot(o_grad, k + s.NKV * s.HS + j * KV, s.HS) - row_delta);
    lane_axpy(acc, ds, k + j * KV, s.HS);
  }
  const float dq = sum_warps(partial, acc, s.HS, threadIdx.x);
  if (threadIdx.x < s.HS) {
    T* target = dqkv + (b * s.Tq + i) * W + h * s.HS + threadIdx.x;
    *target = store_as<T>(load_f32(*target) + scale * dq);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowWarps* kWarpSize)
    block_dkv_kernel(float* __restrict__ dkv, const T* __restrict__ dout, const T* __restrict__ qkv,
                     const float* __restrict__ kv, const float* __restrict__ lse, const float* __restrict__ delta,
                     BlockShape s, float scale) {
  __shared__ WarpRows partial;
  const int64_t j = blockIdx.x % s.Tk, g = (blockIdx.x / s.Tk) % s.NKV, b = blockIdx.x / (s.Tk * s.NKV);
  const int64_t group = s.NH / s.NKV, W = (s.NH + 2 * s.NKV) * s.HS, KV = 2 * s.NKV * s.HS, C = s.NH * s.HS;
  // The rows that see key j: at or past it, and (document starts being non-decreasing over the rows)
  // those whose document starts at or before it.
  const int64_t first_row = count_before(s.q_pos, s.Tq, s.kv_pos[j], false);
  const int64_t end_row =
      s.q_doc_starts == nullptr ? s.Tq : count_before(s.q_doc_starts + b * s.Tq, s.Tq, s.kv_pos[j], true);
  const int64_t rows = end_row > first_row ? end_row - first_row : 0;
  const float* key = kv + (b * s.Tk + j) * KV + g * s.HS;
  float k_scaled[kRowPerLane], v[kRowPerLane], dk[kRowPerLane] = {}, dv[kRowPerLane] = {};
  load_lane_row(k_scaled, key, s.HS, scale);
  load_lane_row(v, key + s.NKV * s.HS, s.HS, 1.0f);
  for (int64_t item = threadIdx.x / kWarpSize; item < group * rows; item += kRowWarps) {
    const int64_t h = g * group + item / rows, i = first_row + item % rows;
    const int64_t bhi = (b * s.NH + h) * s.Tq + i;
    const T* q_row = qkv + (b * s.Tq + i) * W + h * s.HS;
    const T* o_grad = dout + (b * s.Tq + i) * C + h * s.HS;
    const float p = __expf(warp_dot(k_scaled, q_row, s.HS) - lse[bhi]);
    const float ds = p * (warp_dot(v, o_grad, s.HS) - delta[bhi]);
    lane_axpy(dv, p, o_grad, s.HS);
    lane_axpy(dk, ds, q_row, s.HS);
  }
  const float dk_sum = sum_warps(partial, dk, s.HS, threadIdx.x);
  const float dv_sum = sum_warps(partial, dv, s.HS, threadIdx.x);
  if (threadIdx.x < s.HS) {
    float* target = dkv + (b * s.Tk + j) * KV + g * s.HS + threadIdx.x;
    target[0] += scale * dk_sum;
    target[s.NKV * s.HS] += dv_sum;
  }
}

// kv row r = qkv row r's channels [NH HS, (NH + 2 NKV) HS), widened to fp32; `to_qkv` the other way.
template <typename T>
__global__ void kv_copy_kernel(float* __restrict__ kv, T* __restrict__ qkv, int64_t rows, int64_t NH, int64_t KV,
                               int64_t HS, bool to_qkv) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= rows * KV) return;
  const int64_t r = n / KV, c = n % KV;
  T* q_side = qkv + r * (NH * HS + KV) + NH * HS + c;
  if (to_qkv) *q_side = store_as<T>(kv[n]);
  else kv[n] = load_f32(*q_side);
}

// kv_copy_kernel over every element of the rows' k and v channels; only the side named by to_qkv is written.
template <typename T>
void launch_kv_copy(float* kv, T* qkv, int64_t rows, int64_t NH, int64_t NKV, int64_t HS, bool to_qkv,
                    cudaStream_t stream) {
  const int64_t n = rows * 2 * NKV * HS;
  if (n == 0) return;
  kv_copy_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(kv, qkv, rows, NH, 2 * NKV * HS, HS, to_qkv);
  CUDA_CHECK_LAUNCH();
}

void check_head_size(const char* op, int64_t HS) {
  TS_CHECK(HS >= 1 && HS <= kMaxBlockHeadSize, op, " on the GPU: head size ", HS, " is above ", kMaxBlockHeadSize,
           "; run context parallelism on the CPU for this model");
}

}  // namespace

// --- launchers ---

template <typename T>
void attention_block_forward(T* out, float* lse, const T* qkv, const float* kv, const BlockShape& s, bool first,
                             cudaStream_t stream) {
  check_head_size("attention_block_forward", s.HS);
  if (s.B * s.NH * s.Tq == 0) return;
  block_forward_kernel<T><<<s.B * s.NH * s.Tq, kRowWarps * kWarpSize, 0, stream>>>(out, lse, qkv, kv, s,
                                                                                  1.0f / sqrtf(float(s.HS)), first);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_block_delta(float* delta, const T* dout, const T* out, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                           cudaStream_t stream) {
  const int64_t rows = B * T_ * NH;
  if (rows == 0) return;
  block_delta_kernel<T><<<ceil_div(rows, kRowWarps), kRowWarps * kWarpSize, 0, stream>>>(delta, dout, out, B, T_, NH,
                                                                                       HS);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_block_backward(T* dqkv, float* dkv, const T* dout, const T* qkv, const float* kv, const float* lse,
                              const float* delta, const BlockShape& s, cudaStream_t stream) {
  check_head_size("attention_block_backward", s.HS);
  const float scale = 1.0f / sqrtf(float(s.HS));
  if (s.B * s.NH * s.Tq > 0) {
    block_dq_kernel<T><<<s.B * s.NH * s.Tq, kRowWarps * kWarpSize, 0, stream>>>(dqkv, dout, qkv, kv, lse, delta, s,
                                                                              scale);
    CUDA_CHECK_LAUNCH();
  }
  if (s.B * s.NKV * s.Tk > 0) {
    block_dkv_kernel<T><<<s.B * s.NKV * s.Tk, kRowWarps * kWarpSize, 0, stream>>>(dkv, dout, qkv, kv, lse, delta, s,
                                                                                scale);
    CUDA_CHECK_LAUNCH();
  }
}

template <typename T>
void attention_block_kv(float* kv, const T* qkv, int64_t rows, int64_t NH, int64_t NKV, int64_t HS,
                        cudaStream_t stream) {
  launch_kv_copy(kv, const_cast<T*>(qkv), rows, NH, NKV, HS, false, stream);
}

template <typename T>
void attention_block_kv_to_qkv(T* dqkv, const float* dkv, int64_t rows, int64_t NH, int64_t NKV, int64_t HS,
                               cudaStream_t stream) {
  launch_kv_copy(const_cast<float*>(dkv), dqkv, rows, NH, NKV, HS, true, stream);
}

#define INSTANTIATE(T)                                                                                               \
  template void attention_block_forward<T>(T*, float*, const T*, const float*, const BlockShape&, bool,             \
                                           cudaStream_t);                                                            \
  template void attention_block_delta<T>(float*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,            \
                                         cudaStream_t);                                                              \
  template void attention_block_backward<T>(T*, float*, const T*, const T*, const float*, const float*, const float*, \
                                            const BlockShape&, cudaStream_t);                                        \
  template void attention_block_kv<T>(float*, const T*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);          \
  template void attention_block_kv_to_qkv<T>(T*, const float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::cuda
