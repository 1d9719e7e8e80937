// One query row's attention over a run of keys, by a block of kRowWarps warps: the device half shared
// by the key/value-cache kernel (attention_kv.cu) and the ring-attention block kernel
// (attention_block.cu). The warps take interleaved keys, each keeping an online softmax (running max,
// sum and the weighted sum of values, HS/32 elements per lane); then the block merges the warps'
// partial results. Arithmetic fp32 over keys and values of any storage type. Also the lane-row helpers
// (a head row spread over a warp's lanes) the block kernels' backward uses. Included by .cu files.
#pragma once

#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {

constexpr int kRowWarps = 8;
constexpr int kRowMaxHeadSize = 256;
constexpr int kRowPerLane = kRowMaxHeadSize / kWarpSize;  // head elements a lane holds

// The block's shared state for one row: the warps' partial results, then the merged row.
struct RowAttention {
  float warp_max[kRowWarps], warp_sum[kRowWarps];
  float warp_acc[kRowWarps][kRowMaxHeadSize];
  float out[kRowMaxHeadSize];  // softmax(q k^T scale) v over the keys, normalised
  float lse;                   // natural log-sum-exp of the scaled scores; -inf when there was no key
};

// A row of HS elements spread over a warp's lanes: lane l holds elements l, l + 32, ... (kRowPerLane).
// Loads one from memory, times `scale` (elements past HS are 0).
template <typename S>
__device__ void load_lane_row(float (&dst)[kRowPerLane], const S* row, int64_t HS, float scale) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int r = 0; r < kRowPerLane; ++r) {
    const int64_t e = lane + r * kWarpSize;
    dst[r] = e < HS ? load_f32(row[e]) * scale : 0.0f;
  }
}

// The warp's dot product of a lane row with a row in memory (every lane gets it).
template <typename S>
__device__ float warp_dot(const float (&a)[kRowPerLane], const S* row, int64_t HS) {
  const int lane = threadIdx.x % kWarpSize;
  float dot = 0.0f;
#pragma unroll
  for (int r = 0; r < kRowPerLane; ++r) {
    const int64_t e = lane + r * kWarpSize;
    if (e < HS) dot += a[r] * load_f32(row[e]);
  }
  return warp_sum(dot);
}

// acc = keep · acc + w · row, over a lane's elements.
template <typename S>
__device__ void lane_axpy(float (&acc)[kRowPerLane], float w, const S* row, int64_t HS, float keep = 1.0f) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int r = 0; r < kRowPerLane; ++r) {
    const int64_t e = lane + r * kWarpSize;
    acc[r] = acc[r] * keep + (e < HS ? w * load_f32(row[e]) : 0.0f);
  }
}

// Row q (HS elements) against keys j in [0, keys): key j at k + j * ld, value at v + j * ld. Every
// thread of the block calls it; on return `row` holds the result (after a barrier).
template <typename TQ, typename TK>
__device__ void attend_row(RowAttention& row, const TQ* __restrict__ q_row, const TK* __restrict__ k,
                           const TK* __restrict__ v, int64_t ld, int64_t keys, int64_t HS, float scale) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  float q[kRowPerLane], acc[kRowPerLane] = {};
  load_lane_row(q, q_row, HS, scale);
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int64_t j = warp; j < keys; j += kRowWarps) {
    const float score = warp_dot(q, k + j * ld, HS);
    const float new_max = fmaxf(running_max, score);
    const float rescale = __expf(running_max - new_max), weight = __expf(score - new_max);
    running_sum = running_sum * rescale + weight;
    lane_axpy(acc, weight, v + j * ld, HS, rescale);
    running_max = new_max;
  }
  if (lane == 0) {
    row.warp_max[warp] = running_max;
    row.warp_sum[warp] = running_sum;
  }
#pragma unroll
  for (int r = 0; r < kRowPerLane; ++r) {
    const int64_t i = lane + r * kWarpSize;
    if (i < HS) row.warp_acc[warp][i] = acc[r];
  }
  __syncthreads();
  // A warp that saw no key has sum 0 and weighs nothing.
  float top = -INFINITY;
  for (int w = 0; w < kRowWarps; ++w) top = fmaxf(top, row.warp_max[w]);
  float weight[kRowWarps], total = 0.0f;
  for (int w = 0; w < kRowWarps; ++w) {
    weight[w] = row.warp_sum[w] > 0.0f ? __expf(row.warp_max[w] - top) : 0.0f;
    total += row.warp_sum[w] * weight[w];
  }
  for (int64_t i = threadIdx.x; i < HS; i += blockDim.x) {
    float value = 0.0f;
    for (int w = 0; w < kRowWarps; ++w) value += row.warp_acc[w][i] * weight[w];
    row.out[i] = total > 0.0f ? value / total : 0.0f;
  }
  if (threadIdx.x == 0) row.lse = total > 0.0f ? top + logf(total) : -INFINITY;
  __syncthreads();
}

}  // namespace tessera::cuda
