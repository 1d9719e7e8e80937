// One query row's attention over a run of keys, by a block of kRowWarps warps: the device half shared
// by the key/value-cache kernel (attention_kv.cu) and the ring-attention block kernel
// (attention_block.cu). The warps take interleaved keys, each keeping an online softmax (running max,
// sum and the weighted sum of values, HS/32 elements per lane); then the block merges the warps'
// partial results. Arithmetic fp32 over keys and values of any storage type. Included by .cu files.
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

// Row q (HS elements) against keys j in [0, keys): key j at k + j * ld, value at v + j * ld. Every
// thread of the block calls it; on return `row` holds the result (after a barrier).
template <typename TQ, typename TK>
__device__ void attend_row(RowAttention& row, const TQ* __restrict__ q_row, const TK* __restrict__ k,
                           const TK* __restrict__ v, int64_t ld, int64_t keys, int64_t HS, float scale) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  float q[kRowPerLane], acc[kRowPerLane];
#pragma unroll
  for (int r = 0; r < kRowPerLane; ++r) {
    const int64_t i = lane + r * kWarpSize;
    q[r] = i < HS ? load_f32(q_row[i]) * scale : 0.0f;
    acc[r] = 0.0f;
  }
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int64_t j = warp; j < keys; j += kRowWarps) {
    const TK* k_j = k + j * ld;
    const TK* v_j = v + j * ld;
    float dot = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowPerLane; ++r) {
      const int64_t i = lane + r * kWarpSize;
      if (i < HS) dot += q[r] * load_f32(k_j[i]);
    }
    const float score = warp_sum(dot);
    const float new_max = fmaxf(running_max, score);
    const float rescale = __expf(running_max - new_max), weight = __expf(score - new_max);
    running_sum = running_sum * rescale + weight;
#pragma unroll
    for (int r = 0; r < kRowPerLane; ++r) {
      const int64_t i = lane + r * kWarpSize;
      acc[r] = acc[r] * rescale + (i < HS ? weight * load_f32(v_j[i]) : 0.0f);
    }
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
