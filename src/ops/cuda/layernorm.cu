// LayerNorm on the GPU, eps = 1e-5, storage T = float, bf16 or fp16 for the activations, weight
// and bias, fp32 arithmetic and statistics. One warp per row (8 rows per block): forward takes the mean, then
// the variance around it (two passes over the row, as the CPU does), then writes out, mean and
// rstd. Backward writes (or adds to) dx per row the same way, then adds dweight and dbias (fp32) as
// deterministic column sums (column_sums.cuh):
//   dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)),  dnorm = dout * weight
//   dweight += sum_n dout * xhat;  dbias += sum_n dout.
// Rows of up to 16 chunks of 32 * W channels (4,096 in bf16 and fp16, 512 in fp32) take one fused kernel: each
// lane sums the column terms of its channels over the rows it writes dx for, the block adds its warps'
// sums, and only those block sums (not dout and x again) are read to finish the column sums. A warp
// holds up to 3 chunks in registers, so a row of up to 768 channels (in 16 bits) is one warp's; a wider
// one is shared by a group of 2, 4 or 8 warps of 2 chunks each, which add their row sums in warp order
// through shared memory. The blocks, and so the order of every sum, depend on N and C alone: the same
// bits on every run and GPU.
// The fused residual_layernorm_forward writes r = a + b (rounded to T) and normalises the rounded r
// in the same kernel: the same bits as residual_forward then layernorm_forward. A forward row of up to
// 8 chunks a lane (2,048 channels on the 16-byte path, else 256) stays in registers between its
// passes; wider rows are read again by each pass.
// Each lane takes W consecutive channels at a time: 16 bytes for bf16 and fp16 rows when C and the
// pointers allow, else 1. fp32 rows always use W = 1, which keeps their summation order (and bits)
// unchanged.
#include "ops/cuda/column_sums.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/layernorm_cuda.h"
#include "ops/cuda/vector_io.cuh"
#include "ops/cuda/warp_rows.cuh"

namespace tessera::cuda {
namespace {

constexpr float kEps = 1e-5f;

// --- kernels ---

// Given this lane's partial sum of the row x_n (C), finishes the mean and the variance, writes
// out_n = (x_n - mean) * rstd * weight + bias and, from lane 0, mean[n] and rstd[n].
template <typename T, int W>
__device__ void layernorm_finish_row(T* out_n, float* mean, float* rstd, const T* x_n, const T* weight,
                                     const T* bias, int64_t n, int64_t C, float lane_sum) {
  const int lane = threadIdx.x % kWarpSize;
  const float m = warp_sum(lane_sum) / float(C);
  float var = 0.0f;
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float v[W];
    load_f32_vec(v, x_n + c);
#pragma unroll
    for (int k = 0; k < W; k++) var += (v[k] - m) * (v[k] - m);
  }
  const float s = rsqrtf(warp_sum(var) / float(C) + kEps);
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float v[W], w[W], b[W];
    load_f32_vec(v, x_n + c);
    load_f32_vec(w, weight + c);
    load_f32_vec(b, bias + c);
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = (v[k] - m) * s * w[k] + b[k];
    store_f32_vec(out_n + c, v);
  }
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T, int W>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* x, const T* weight,
                                         const T* bias, int64_t N, int64_t C) {
  const int64_t n = warp_row();
  if (n >= N) return;  // a whole warp leaves together
  const T* x_n = x + n * C;  // (C)
  const float sum = row_lane_sum<W>(x_n, C, [](float v) { return v; });
  layernorm_finish_row<T, W>(out + n * C, mean, rstd, x_n, weight, bias, n, C, sum);
}

// r = a + b rounded to T, then LayerNorm of r. Each lane reads back only the channels it wrote, so
// no barrier is needed between the passes.
template <typename T, int W>
__global__ void residual_layernorm_forward_kernel(T* residual_out, T* out, float* mean, float* rstd, const T* a,
                                                  const T* b, const T* weight, const T* bias, int64_t N,
                                                  int64_t C) {
  const int64_t n = warp_row();
  if (n >= N) return;
  T* r_n = residual_out + n * C;  // (C)
  const float sum = add_row_rounded<T, W>(r_n, a + n * C, b + n * C, C, [](float r) { return r; });
  layernorm_finish_row<T, W>(out + n * C, mean, rstd, r_n, weight, bias, n, C, sum);
}

// The forward with the row in registers: a lane's kChunks chunks, channels (j * 32 + lane) * W + [0, W)
// (the strided loops' channels, in their order), loaded at once, so a row waits on DRAM once where the
// loops above read it three times (the weight and bias, read last, come from L1 or L2); then the same
// arithmetic in the same order (the same bits).
// kResidual: the row is r = a + b (`x` is a) rounded to T, stored to residual_out and normalised as
// stored, as residual_layernorm_forward_kernel does.
template <typename T, int W, int kChunks, bool kResidual>
__global__ void layernorm_forward_kept_kernel(T* residual_out, T* out, float* mean, float* rstd, const T* x,
                                              const T* b, const T* weight, const T* bias, int64_t N, int64_t C) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const int lane = threadIdx.x % kWarpSize;
  auto channel = [lane](int j) { return (int64_t(j) * kWarpSize + lane) * W; };
  PackedChunk<W, T> x_chunks[kChunks], b_chunks[kChunks];
#pragma unroll
  for (int j = 0; j < kChunks; j++) {
    if (channel(j) >= C) break;
    x_chunks[j] = load_packed<W>(x + n * C + channel(j));
    if constexpr (kResidual) b_chunks[j] = load_packed<W>(b + n * C + channel(j));
  }
  float v[kChunks][W];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kChunks; j++) {
    if (channel(j) >= C) break;
    widen(v[j], x_chunks[j]);
    if constexpr (kResidual) {
      float vb[W];
      widen(vb, b_chunks[j]);
#pragma unroll
      for (int k = 0; k < W; k++) v[j][k] += vb[k];
      store_f32_vec(residual_out + n * C + channel(j), v[j]);
#pragma unroll
      for (int k = 0; k < W; k++) v[j][k] = load_f32(store_as<T>(v[j][k]));  // r as stored
    }
#pragma unroll
    for (int k = 0; k < W; k++) sum += v[j][k];
  }
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
#pragma unroll
  for (int j = 0; j < kChunks; j++) {
    if (channel(j) >= C) break;
#pragma unroll
    for (int k = 0; k < W; k++) var += (v[j][k] - m) * (v[j][k] - m);
  }
  const float s = rsqrtf(warp_sum(var) / float(C) + kEps);
#pragma unroll
  for (int j = 0; j < kChunks; j++) {
    if (channel(j) >= C) break;
    float w[W], bb[W], o[W];
    load_f32_vec(w, weight + channel(j));
    load_f32_vec(bb, bias + channel(j));
#pragma unroll
    for (int k = 0; k < W; k++) o[k] = (v[j][k] - m) * s * w[k] + bb[k];
    store_f32_vec(out + n * C + channel(j), o);
  }
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

// Adds a chunk of W channels to the row sums of dnorm = dout * weight and of dnorm * xhat.
template <int W>
__device__ __forceinline__ void add_dnorm_terms(const float (&d)[W], const float (&v)[W], const float (&w)[W], float m,
                                                float s, float& dnorm_sum, float& dnorm_xhat_sum) {
#pragma unroll
  for (int k = 0; k < W; k++) {
    const float dnorm = d[k] * w[k];
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * (v[k] - m) * s;
  }
}

// A chunk of dx from dout d, input v and weight w: v becomes old + rstd * (dnorm - mean(dnorm) - xhat *
// mean(dnorm * xhat)).
template <int W>
__device__ __forceinline__ void dx_chunk(float (&v)[W], const float (&d)[W], const float (&w)[W],
                                         const float (&old)[W], float m, float s, float dnorm_mean,
                                         float dnorm_xhat_mean) {
#pragma unroll
  for (int k = 0; k < W; k++) {
    const float xhat = (v[k] - m) * s;
    v[k] = old[k] + s * (d[k] * w[k] - dnorm_mean - xhat * dnorm_xhat_mean);
  }
}

template <typename T, int W>
__global__ void layernorm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* weight, const float* mean,
                                             const float* rstd, int64_t N, int64_t C, bool add_to_dx) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = warp_row();
  if (n >= N) return;
  const T* dout_n = dout + n * C;  // (C)
  const T* x_n = x + n * C;        // (C)
  T* dx_n = dx + n * C;            // (C)
  const float m = mean[n], s = rstd[n];
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float d[W], v[W], w[W];
    load_f32_vec(d, dout_n + c);
    load_f32_vec(v, x_n + c);
    load_f32_vec(w, weight + c);
    add_dnorm_terms(d, v, w, m, s, dnorm_sum, dnorm_xhat_sum);
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / float(C);
  const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / float(C);
  for (int64_t c = lane * W; c < C; c += kWarpSize * W) {
    float d[W], v[W], w[W], old[W] = {};
    load_f32_vec(d, dout_n + c);
    load_f32_vec(v, x_n + c);
    load_f32_vec(w, weight + c);
    if (add_to_dx) load_f32_vec(old, dx_n + c);
    dx_chunk(v, d, w, old, m, s, dnorm_mean, dnorm_xhat_mean);
    store_f32_vec(dx_n + c, v);
  }
}

// partial_row[c] = the sum over the block's row slots, in slot order, of their warps' `lane_sums` for
// channel c (the channels of chunk j of a warp: `channel(j)`, W each), through the tile.
template <int W, int kChunks, int kSlots, int kWidth, typename Channel>
__device__ void write_block_sums(float (&tile)[kSlots][kWidth], const float (&lane_sums)[kChunks][W], int slot,
                                 Channel channel, float* partial_row, int64_t C) {
#pragma unroll
  for (int j = 0; j < kChunks; j++)
#pragma unroll
    for (int k = 0; k < W; k++) tile[slot][channel(j) + k] = lane_sums[j][k];
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < kSlots; r++) sum += tile[r][c];
    partial_row[c] = sum;
  }
  __syncthreads();  // before the tile is written again
}

// The fused backward: dx of rows [begin, end) of block b, kGroup warps per row (the block's 8 warps take
// kSlots = 8 / kGroup rows at a time), with partial (2, gridDim.x, C) getting the block's sums of
// dout * xhat and dout per channel. Warp g of a row's group takes the channels (q * 32 + lane) * W + k
// of the chunks q = j * kGroup + g, j < kChunks: it loads all of a row's chunks at once, dout, x, the
// weight (from L1 after the first row) and the dx it adds to, so a row waits on memory once, not twice
// (the old dx was loaded after the row sums); holding the weight across rows instead would spill at 3
// chunks. With one warp per row the arithmetic is layernorm_backward_dx_kernel's, in its order (the same
// dx bits); a group adds its warps' row sums in warp order through shared memory.
template <typename T, int W, int kChunks, int kGroup>
__global__ void __launch_bounds__(kRowThreads, 2)  // two blocks an SM: 128 registers, no spills at 3 chunks
    layernorm_backward_fused_kernel(T* dx, float* partial, const T* dout, const T* x, const T* weight,
                                    const float* mean, const float* rstd, int64_t N, int64_t C,
                                    int64_t rows_per_block, bool add_to_dx) {
  constexpr int kSlots = kRowsPerBlock / kGroup;
  __shared__ float tile[kSlots][kChunks * kGroup * kWarpSize * W];
  __shared__ float group_sums[2][kSlots][kGroup][2];  // by iteration parity: one barrier an iteration
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int slot = warp / kGroup, g = warp % kGroup;
  auto channel = [lane, g](int j) { return ((int64_t(j) * kGroup + g) * kWarpSize + lane) * W; };
  float dweight_sum[kChunks][W] = {}, dbias_sum[kChunks][W] = {};
  const int64_t begin = int64_t(blockIdx.x) * rows_per_block;
  const int64_t end = begin + rows_per_block < N ? begin + rows_per_block : N;
  for (int64_t first = begin, it = 0; first < end; first += kSlots, it++) {  // every warp, every iteration
    const int64_t n = first + slot;
    const bool active = n < end;
    const T* dout_n = dout + n * C;  // (C)
    const T* x_n = x + n * C;        // (C)
    T* dx_n = dx + n * C;            // (C)
    PackedChunk<W, T> d_chunks[kChunks], x_chunks[kChunks], w_chunks[kChunks], old_chunks[kChunks];
    float m = 0.0f, s = 0.0f, dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
    if (active) {
#pragma unroll
      for (int j = 0; j < kChunks; j++) {
        if (channel(j) >= C) continue;
        d_chunks[j] = load_packed<W>(dout_n + channel(j));
        x_chunks[j] = load_packed<W>(x_n + channel(j));
        w_chunks[j] = load_packed<W>(weight + channel(j));
        if (add_to_dx) old_chunks[j] = load_packed<W>(dx_n + channel(j));
      }
      m = mean[n];
      s = rstd[n];
#pragma unroll
      for (int j = 0; j < kChunks; j++) {
        if (channel(j) >= C) continue;
        float d[W], v[W], w[W];
        widen(d, d_chunks[j]);
        widen(v, x_chunks[j]);
        widen(w, w_chunks[j]);
        add_dnorm_terms(d, v, w, m, s, dnorm_sum, dnorm_xhat_sum);
      }
    }
    dnorm_sum = warp_sum(dnorm_sum);
    dnorm_xhat_sum = warp_sum(dnorm_xhat_sum);
    if constexpr (kGroup > 1) {
      float(&sums)[kSlots][kGroup][2] = group_sums[it & 1];
      if (lane == 0) {
        sums[slot][g][0] = dnorm_sum;
        sums[slot][g][1] = dnorm_xhat_sum;
      }
      __syncthreads();
      dnorm_sum = dnorm_xhat_sum = 0.0f;
#pragma unroll
      for (int q = 0; q < kGroup; q++) {
        dnorm_sum += sums[slot][q][0];
        dnorm_xhat_sum += sums[slot][q][1];
      }
    }
    if (!active) continue;
    const float dnorm_mean = dnorm_sum / float(C), dnorm_xhat_mean = dnorm_xhat_sum / float(C);
#pragma unroll
    for (int j = 0; j < kChunks; j++) {
      if (channel(j) >= C) continue;
      float d[W], v[W], w[W], old[W] = {};
      widen(d, d_chunks[j]);
      widen(v, x_chunks[j]);
      widen(w, w_chunks[j]);
      if (add_to_dx) widen(old, old_chunks[j]);
#pragma unroll
      for (int k = 0; k < W; k++) {
        dweight_sum[j][k] += d[k] * ((v[k] - m) * s);
        dbias_sum[j][k] += d[k];
      }
      dx_chunk(v, d, w, old, m, s, dnorm_mean, dnorm_xhat_mean);
      store_f32_vec(dx_n + channel(j), v);
    }
  }
  write_block_sums(tile, dweight_sum, slot, channel, partial + int64_t(blockIdx.x) * C, C);
  write_block_sums(tile, dbias_sum, slot, channel, partial + (int64_t(gridDim.x) + blockIdx.x) * C, C);
}

// (dout * xhat, dout) at (n, c): the terms of dweight and dbias.
template <typename T>
struct LayerNormParamGradLoad {
  const T* dout;
  const T* x;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t n, int64_t c, float (&v)[2]) const {
    const float d = load_f32(dout[n * C + c]);
    v[0] = d * (load_f32(x[n * C + c]) - mean[n]) * rstd[n];
    v[1] = d;
  }
};

constexpr int kMaxLaneChunks = 3;  // one warp a row: C <= kMaxLaneChunks * 32 * W (4 spills registers)
constexpr int kMaxGroupChunks = 2 * kRowsPerBlock;  // chunks of a row a group of warps takes: 2 a warp, 8 warps
constexpr int64_t kMinRowsPerWarp = 4;     // rows each warp of the fused backward takes at least
constexpr int64_t kMaxFusedBlocks = 1024;  // its blocks at most: a bound on the partials it writes

// Whether the fused backward takes rows of C channels in W-channel chunks: up to 3 chunks a warp alone,
// up to 16 (4,096 channels in bf16 and fp16, 512 in fp32) in a group of 2, 4 or 8 warps of 2 each.
bool fused_backward_covers(int64_t C, int W) { return ceil_div(C, int64_t(kWarpSize) * W) <= kMaxGroupChunks; }

// The fused backward over N rows in W-channel chunks: blocks from N and the group alone, partials in
// scratch, then the column sums' second pass.
template <typename T, int W>
void launch_fused_backward(T* dx, float* dweight, float* dbias, const T* dout, const T* x, const T* weight,
                           const float* mean, const float* rstd, int64_t N, int64_t C, bool add_to_dx,
                           cudaStream_t stream) {
  const int64_t chunks = ceil_div(C, int64_t(kWarpSize) * W);
  const int group = chunks <= kMaxLaneChunks ? 1 : chunks <= 4 ? 2 : chunks <= 8 ? 4 : kRowsPerBlock;
  const int64_t blocks = std::min(kMaxFusedBlocks, ceil_div(N, kRowsPerBlock / group * kMinRowsPerWarp));
  const int64_t rows_per_block = ceil_div(N, blocks);
  const DeviceScratch partial(size_t(2 * blocks * C) * sizeof(float));
  auto launch = [&](auto kernel) {
    kernel<<<unsigned(blocks), kRowThreads, 0, stream>>>(dx, partial.as<float>(), dout, x, weight, mean, rstd, N, C,
                                                         rows_per_block, add_to_dx);
    CUDA_CHECK_LAUNCH();
  };
  switch (group) {
    case 1:
      if (chunks == 1) launch(layernorm_backward_fused_kernel<T, W, 1, 1>);
      else if (chunks == 2) launch(layernorm_backward_fused_kernel<T, W, 2, 1>);
      else launch(layernorm_backward_fused_kernel<T, W, kMaxLaneChunks, 1>);
      break;
    case 2: launch(layernorm_backward_fused_kernel<T, W, 2, 2>); break;
    case 4: launch(layernorm_backward_fused_kernel<T, W, 2, 4>); break;
    default: launch(layernorm_backward_fused_kernel<T, W, 2, kRowsPerBlock>); break;
  }
  column_sums_finish<2>(ColumnOutputs<2>{{dweight, dbias}}, partial.as<float>(), blocks, C, stream);
}

// The kept-row forward for rows of up to kMaxKeptChunks chunks a lane (2,048 channels on the 16-byte
// path, 256 on the scalar one); false (nothing queued) for wider rows, which take the strided kernels.
constexpr int kMaxKeptChunks = 8;

template <typename T, int W, bool kResidual>
bool launch_kept_forward(T* residual_out, T* out, float* mean, float* rstd, const T* x, const T* b, const T* weight,
                         const T* bias, int64_t N, int64_t C, cudaStream_t stream) {
  const int64_t chunks = ceil_div(C, int64_t(kWarpSize) * W);
  if (chunks > kMaxKeptChunks) return false;
  auto launch = [&](auto kernel) {
    kernel<<<row_blocks(N), kRowThreads, 0, stream>>>(residual_out, out, mean, rstd, x, b, weight, bias, N, C);
    CUDA_CHECK_LAUNCH();
  };
  switch (chunks) {
    case 1: launch(layernorm_forward_kept_kernel<T, W, 1, kResidual>); break;
    case 2: launch(layernorm_forward_kept_kernel<T, W, 2, kResidual>); break;
    case 3: launch(layernorm_forward_kept_kernel<T, W, 3, kResidual>); break;
    case 4: launch(layernorm_forward_kept_kernel<T, W, 4, kResidual>); break;
    default: launch(layernorm_forward_kept_kernel<T, W, kMaxKeptChunks, kResidual>); break;
  }
  return true;
}

}  // namespace

// --- launchers ---

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* x, const T* weight, const T* bias,
                       int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  if (vector_rows<T>(C, {out, x, weight, bias})
          ? launch_kept_forward<T, kRowVec<T>, false>(nullptr, out, mean, rstd, x, nullptr, weight, bias, N, C, stream)
          : launch_kept_forward<T, 1, false>(nullptr, out, mean, rstd, x, nullptr, weight, bias, N, C, stream))
    return;
  if (vector_rows<T>(C, {out, x, weight, bias}))
    layernorm_forward_kernel<T, kRowVec<T>><<<row_blocks(N), kRowThreads, 0, stream>>>(out, mean, rstd, x, weight,
                                                                                    bias, N, C);
  else
    layernorm_forward_kernel<T, 1><<<row_blocks(N), kRowThreads, 0, stream>>>(out, mean, rstd, x, weight, bias, N,
                                                                              C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void residual_layernorm_forward(T* residual_out, T* out, float* mean, float* rstd, const T* a, const T* b,
                                const T* weight, const T* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  if (vector_rows<T>(C, {residual_out, out, a, b, weight, bias})
          ? launch_kept_forward<T, kRowVec<T>, true>(residual_out, out, mean, rstd, a, b, weight, bias, N, C, stream)
          : launch_kept_forward<T, 1, true>(residual_out, out, mean, rstd, a, b, weight, bias, N, C, stream))
    return;
  if (vector_rows<T>(C, {residual_out, out, a, b, weight, bias}))
    residual_layernorm_forward_kernel<T, kRowVec<T>><<<row_blocks(N), kRowThreads, 0, stream>>>(
        residual_out, out, mean, rstd, a, b, weight, bias, N, C);
  else
    residual_layernorm_forward_kernel<T, 1><<<row_blocks(N), kRowThreads, 0, stream>>>(
        residual_out, out, mean, rstd, a, b, weight, bias, N, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_backward(T* dx, float* dweight, float* dbias, const T* dout, const T* x, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, bool add_to_dx,
                        cudaStream_t stream) {
  if (N == 0 || C == 0) return;  // nothing to write (and no column of sums to finish)
  const bool vector = vector_rows<T>(C, {dx, dout, x, weight});
  if (fused_backward_covers(C, vector ? kRowVec<T> : 1)) {
    if (vector)
      launch_fused_backward<T, kRowVec<T>>(dx, dweight, dbias, dout, x, weight, mean, rstd, N, C, add_to_dx, stream);
    else
      launch_fused_backward<T, 1>(dx, dweight, dbias, dout, x, weight, mean, rstd, N, C, add_to_dx, stream);
    return;
  }
  if (vector)
    layernorm_backward_dx_kernel<T, kRowVec<T>><<<row_blocks(N), kRowThreads, 0, stream>>>(dx, dout, x, weight, mean,
                                                                                        rstd, N, C, add_to_dx);
  else
    layernorm_backward_dx_kernel<T, 1><<<row_blocks(N), kRowThreads, 0, stream>>>(dx, dout, x, weight, mean, rstd,
                                                                                  N, C, add_to_dx);
  CUDA_CHECK_LAUNCH();
  column_sums_accumulate<2>(ColumnOutputs<2>{{dweight, dbias}}, N, C,
                            LayerNormParamGradLoad<T>{dout, x, mean, rstd, C}, stream);
}

#define INSTANTIATE(T)                                                                                           \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, int64_t,            \
                                     cudaStream_t);                                                                \
  template void residual_layernorm_forward<T>(T*, T*, float*, float*, const T*, const T*, const T*, const T*,       \
                                              int64_t, int64_t, cudaStream_t);                                     \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const float*, const float*, \
                                      int64_t, int64_t, bool, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
