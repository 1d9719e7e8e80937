// The MoE router and token permutation on the GPU (launchers in moe_cuda.h). The router gives each
// token one warp: lane l holds experts l, l + 32, ... of the row in registers, reductions are warp
// shuffles, and top-K is K warp-wide arg-max rounds over the not yet chosen experts (ties to the lower
// index, NaN never chosen), the CPU's selection order, after DeepSeek's group limit where one is set. The load counts behind the aux-loss gradient
// are integer atomics (exact in any order). Gather, combine and their backwards give each output row
// one block, threads striding over channels; a token's terms are summed in k order.
#include <cmath>

#include "core/cuda/device.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/moe_cuda.h"

namespace tessera::cuda {
namespace {

constexpr int kPerLane = int(kMaxRouterExperts / kWarpSize);  // experts per lane
constexpr int kRouterWarps = 4;                               // tokens per block
constexpr int kRowBlock = 256;                                // threads per row of the permutation kernels
constexpr int kMaxChoices = 8;                                // K
constexpr int kMaxRouterGroups = 32;                          // DeepSeek's expert groups (a bit each)

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The better of two (value, expert) candidates: larger value, then lower expert; expert -1 is none.
__device__ inline void keep_better(float& v, int& e, float other_v, int other_e) {
  if (other_e >= 0 && (e < 0 || other_v > v || (other_v == v && other_e < e))) {
    v = other_v;
    e = other_e;
  }
}

// The lane's value of expert e (held in slot e / 32 of lane e % 32), broadcast to the whole warp.
__device__ inline float lane_value(const float (&v)[kPerLane], int e) {
  float mine = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; j++)
    if (j == e / kWarpSize) mine = v[j];
  return __shfl_sync(0xffffffffu, mine, e % kWarpSize);
}

// DeepSeek's group limit on a row's selection values v (as the CPU's selection_values): each group's
// score is the sum of its two best values (sigmoid) or its best (softmax), from warp-wide top-2 merges;
// the kept_groups best groups stay (ties to the lower group), every other expert's value becomes 0.
__device__ inline void limit_to_groups(float (&v)[kPerLane], bool use_sigmoid, int groups, int kept_groups, int E,
                                       int lane) {
  const int size = E / groups;
  float score[kMaxRouterGroups];
  for (int g = 0; g < groups; g++) {
    float best = -INFINITY, second = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPerLane; j++) {
      const int e = lane + kWarpSize * j;
      if (e >= E || e / size != g) continue;
      if (v[j] > best) {
        second = best;
        best = v[j];
      } else if (v[j] > second) {
        second = v[j];
      }
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const float other_best = __shfl_xor_sync(0xffffffffu, best, offset);
      const float other_second = __shfl_xor_sync(0xffffffffu, second, offset);
      second = fmaxf(fminf(best, other_best), fmaxf(second, other_second));
      best = fmaxf(best, other_best);
    }
    score[g] = use_sigmoid ? best + second : best;
  }
  unsigned kept = 0;  // a bit per group, the same in every lane
  for (int k = 0; k < kept_groups; k++) {
    int pick = -1;
    for (int g = 0; g < groups; g++)
      if (!(kept >> g & 1u) && (pick < 0 || score[g] > score[pick])) pick = g;
    kept |= 1u << pick;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int e = lane + kWarpSize * j;
    if (e < E && !(kept >> (e / size) & 1u)) v[j] = 0.0f;
  }
}

// --- kernels ---

template <typename T>
__global__ void __launch_bounds__(kRouterWarps* kWarpSize)
    moe_router_forward_kernel(int32_t* experts, float* weights, float* scores, float* lse, const T* logits,
                              const float* bias, bool use_sigmoid, bool renormalize, int groups, int kept_groups,
                              int64_t N, int E, int K) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t n = int64_t(blockIdx.x) * kRouterWarps + threadIdx.x / kWarpSize;
  if (n >= N) return;  // whole warps leave together
  const T* l_row = logits + n * E;
  float l[kPerLane], s[kPerLane];
  float row_max = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int e = lane + kWarpSize * j;
    l[j] = e < E ? load_f32(l_row[e]) : -INFINITY;
    row_max = fmaxf(row_max, l[j]);
  }
  row_max = warp_max(row_max);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    s[j] = lane + kWarpSize * j < E ? expf(l[j] - row_max) : 0.0f;
    sum += s[j];
  }
  sum = warp_sum(sum);
  const float inv_sum = 1.0f / sum;
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int e = lane + kWarpSize * j;
    if (e >= E) continue;
    s[j] = use_sigmoid ? sigmoid(l[j]) : s[j] * inv_sum;
    scores[n * E + e] = s[j];
  }
  // Selection values: the scores plus the bias; a chosen expert drops out of later rounds.
  float v[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int e = lane + kWarpSize * j;
    v[j] = e < E ? s[j] + (bias != nullptr ? bias[e] : 0.0f) : NAN;
  }
  if (groups > 1) limit_to_groups(v, use_sigmoid, groups, kept_groups, E, lane);
  float chosen_sum = 0.0f, chosen_score[kMaxChoices];
  for (int k = 0; k < K; k++) {
    float best_v = 0.0f;
    int best_e = -1;
#pragma unroll
    for (int j = 0; j < kPerLane; j++)
      if (!isnan(v[j])) keep_better(best_v, best_e, v[j], lane + kWarpSize * j);
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const float other_v = __shfl_xor_sync(0xffffffffu, best_v, offset);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      keep_better(best_v, best_e, other_v, other_e);
    }
    const float score = best_e >= 0 ? lane_value(s, best_e) : NAN;
#pragma unroll
    for (int j = 0; j < kPerLane; j++)
      if (lane + kWarpSize * j == best_e) v[j] = NAN;
    chosen_score[k] = score;
    if (lane == 0) experts[n * K + k] = best_e;
    chosen_sum += score;
  }
  if (lane == 0) {
    lse[n] = row_max + logf(sum);
    for (int k = 0; k < K; k++) weights[n * K + k] = renormalize ? chosen_score[k] / chosen_sum : chosen_score[k];
  }
}

// count (E) += the assignments of each expert.
__global__ void moe_count_kernel(int32_t* count, const int32_t* experts, int64_t NK) {
  const int64_t a = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (a < NK) atomicAdd(count + experts[a], 1);
}

// Per row, as the CPU: ds = dL/dscores from the aux term (c_e = aux_scale E count_e / N^2) and the
// weights, carried through the score function, plus the z term's (2 z_scale lse / N) softmax(l).
template <typename T>
__global__ void __launch_bounds__(kRouterWarps* kWarpSize)
    moe_router_backward_kernel(T* dlogits, const float* dweights, const int32_t* experts, const float* weights,
                               const float* scores, const float* lse, const T* logits, const int32_t* count,
                               bool use_sigmoid, bool renormalize, float aux_scale, float dz, double aux_tokens,
                               int64_t N, int E, int K) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t n = int64_t(blockIdx.x) * kRouterWarps + threadIdx.x / kWarpSize;
  if (n >= N) return;
  float s[kPerLane], d[kPerLane];
  float T_sum = 0.0f, cs = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int e = lane + kWarpSize * j;
    s[j] = e < E ? scores[n * E + e] : 0.0f;
    d[j] = e < E ? float(double(aux_scale) * double(E) * double(count[e]) / (aux_tokens * aux_tokens)) : 0.0f;
    T_sum += s[j];
    cs += d[j] * s[j];
  }
  if (use_sigmoid) {
    T_sum = warp_sum(T_sum);
    const float cp = warp_sum(cs) / T_sum;
#pragma unroll
    for (int j = 0; j < kPerLane; j++) d[j] = (d[j] - cp) / T_sum;
  }
  float S = 0.0f, dw_w = 0.0f;
  for (int k = 0; k < K; k++) {
    S += scores[n * E + experts[n * K + k]];
    dw_w += dweights[n * K + k] * weights[n * K + k];
  }
  for (int k = 0; k < K; k++) {
    const int e = experts[n * K + k];
#pragma unroll
    for (int j = 0; j < kPerLane; j++)
      if (lane + kWarpSize * j == e) d[j] += renormalize ? (dweights[n * K + k] - dw_w) / S : dweights[n * K + k];
  }
  const float dlse = dz * lse[n];
  float ds_s = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; j++) ds_s += d[j] * s[j];
  if (!use_sigmoid) ds_s = warp_sum(ds_s);
#pragma unroll
  for (int j = 0; j < kPerLane; j++) {
    const int e = lane + kWarpSize * j;
    if (e >= E) continue;
    const float g = use_sigmoid ? d[j] * s[j] * (1.0f - s[j]) + dlse * expf(load_f32(logits[n * E + e]) - lse[n])
                                : s[j] * (d[j] - ds_s) + dlse * s[j];
    dlogits[n * E + e] = store_as<T>(g);
  }
}

__global__ void moe_positions_kernel(int32_t* pos, const int32_t* order, int64_t M) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < M) pos[order[i]] = int32_t(i);
}

// One block per sorted row i < M.
template <typename T>
__global__ void moe_gather_kernel(T* xs, const T* x, const int32_t* order, int K, int64_t C) {
  const int64_t i = blockIdx.x;
  const T* src = x + int64_t(order[i] / K) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) xs[i * C + c] = src[c];
}

// One block per token n.
template <typename T>
__global__ void moe_sum_token_rows_kernel(T* out, const T* rows, const float* weights, const int32_t* pos, int K,
                                          int64_t C) {
  const int64_t n = blockIdx.x;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = 0.0f;
    for (int k = 0; k < K; k++) {
      const int32_t p = pos[n * K + k];
      if (p < 0) continue;
      const float w = weights != nullptr ? weights[n * K + k] : 1.0f;
      sum += w * load_f32(rows[int64_t(p) * C + c]);
    }
    out[n * C + c] = store_as<T>(sum);
  }
}

// One block per sorted row i < M; dweights' other entries were zeroed before.
template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    moe_combine_backward_kernel(T* dys, float* dweights, const T* dout, const T* ys, const float* weights,
                                const int32_t* order, int K, int64_t C) {
  __shared__ float scratch[kWarpSize];
  const int64_t i = blockIdx.x;
  const int32_t a = order[i];
  const float w = weights[a];
  const T* dout_n = dout + int64_t(a / K) * C;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = load_f32(dout_n[c]);
    dys[i * C + c] = store_as<T>(w * g);
    dot += g * load_f32(ys[i * C + c]);
  }
  dot = block_sum(dot, scratch);
  if (threadIdx.x == 0) dweights[a] = dot;
}

}  // namespace

// --- launchers ---

template <typename T>
void moe_router_forward(int32_t* experts, float* weights, float* scores, float* lse, const T* logits, const float* bias,
                        bool use_sigmoid, bool renormalize, int64_t groups, int64_t kept_groups, int64_t N, int64_t E,
                        int64_t K, cudaStream_t stream) {
  TS_CHECK(E <= kMaxRouterExperts && K <= kMaxChoices && groups <= kMaxRouterGroups,
           "moe_router_forward: the GPU router takes up to ", kMaxRouterExperts, " experts, ", kMaxChoices,
           " choices per token and ", kMaxRouterGroups, " expert groups, got E = ", E, ", K = ", K, ", ", groups,
           " groups");
  if (N == 0) return;
  moe_router_forward_kernel<T><<<unsigned(ceil_div(N, kRouterWarps)), kRouterWarps * kWarpSize, 0, stream>>>(
      experts, weights, scores, lse, logits, bias, use_sigmoid, renormalize, int(groups), int(kept_groups), N, int(E),
      int(K));
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void moe_router_backward(T* dlogits, const float* dweights, const int32_t* experts, const float* weights,
                         const float* scores, const float* lse, const T* logits, bool use_sigmoid, bool renormalize,
                         float aux_scale, float z_scale, int64_t N, int64_t E, int64_t K, cudaStream_t stream,
                         const int32_t* aux_counts, double aux_tokens) {
  TS_CHECK(E <= kMaxRouterExperts, "moe_router_backward: the GPU router takes up to ", kMaxRouterExperts,
           " experts, got E = ", E);
  if (N == 0) return;
  const DeviceScratch count_buffer(size_t(E) * sizeof(int32_t));
  const int32_t* count = aux_counts;
  if (!aux_counts) {  // this routing's own
    int32_t* own = count_buffer.as<int32_t>();
    CUDA_CHECK(cudaMemsetAsync(own, 0, size_t(E) * sizeof(int32_t), stream));
    moe_count_kernel<<<unsigned(ceil_div(N * K, kRowBlock)), kRowBlock, 0, stream>>>(own, experts, N * K);
    CUDA_CHECK_LAUNCH();
    count = own;
    aux_tokens = double(N);
  }
  const float dz = 2.0f * z_scale / float(N);
  moe_router_backward_kernel<T><<<unsigned(ceil_div(N, kRouterWarps)), kRouterWarps * kWarpSize, 0, stream>>>(
      dlogits, dweights, experts, weights, scores, lse, logits, count, use_sigmoid, renormalize, aux_scale, dz,
      aux_tokens, N, int(E), int(K));
  CUDA_CHECK_LAUNCH();
}

void moe_positions(int32_t* pos, const int32_t* order, int64_t M, int64_t NK, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(pos, 0xff, size_t(NK) * sizeof(int32_t), stream));  // -1 everywhere
  if (M == 0) return;
  moe_positions_kernel<<<unsigned(ceil_div(M, kRowBlock)), kRowBlock, 0, stream>>>(pos, order, M);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void moe_gather(T* xs, const T* x, const int32_t* order, int64_t M, int64_t K, int64_t C, cudaStream_t stream) {
  if (M == 0) return;
  moe_gather_kernel<T><<<unsigned(M), kRowBlock, 0, stream>>>(xs, x, order, int(K), C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void moe_sum_token_rows(T* out, const T* rows, const float* weights, const int32_t* pos, int64_t N, int64_t K,
                        int64_t C, cudaStream_t stream) {
  if (N == 0) return;
  moe_sum_token_rows_kernel<T><<<unsigned(N), kRowBlock, 0, stream>>>(out, rows, weights, pos, int(K), C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void moe_combine_backward(T* dys, float* dweights, const T* dout, const T* ys, const float* weights,
                          const int32_t* order, int64_t M, int64_t N, int64_t K, int64_t C, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(dweights, 0, size_t(N * K) * sizeof(float), stream));
  if (M == 0) return;
  moe_combine_backward_kernel<T><<<unsigned(M), kRowBlock, 0, stream>>>(dys, dweights, dout, ys, weights, order,
                                                                        int(K), C);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                                              \
  template void moe_router_forward<T>(int32_t*, float*, float*, float*, const T*, const float*, bool, bool,        \
                                      int64_t, int64_t, int64_t, int64_t, int64_t, cudaStream_t);                   \
  template void moe_router_backward<T>(T*, const float*, const int32_t*, const float*, const float*, const float*, \
                                       const T*, bool, bool, float, float, int64_t, int64_t, int64_t, cudaStream_t, \
                                       const int32_t*, double);                                                    \
  template void moe_gather<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, cudaStream_t);              \
  template void moe_sum_token_rows<T>(T*, const T*, const float*, const int32_t*, int64_t, int64_t, int64_t,       \
                                      cudaStream_t);                                                                \
  template void moe_combine_backward<T>(T*, float*, const T*, const T*, const float*, const int32_t*, int64_t,     \
                                        int64_t, int64_t, int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
