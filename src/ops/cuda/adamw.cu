// Fused AdamW on the GPU, fp32 arithmetic: the element update is ops/adamw_element.h, shared with
// the CPU. One thread per element reads param, grad, m, v once and writes param, m, v once (and the
// optional 16-bit mirror of param); bf16 moments (M = __nv_bfloat16) are widened, updated and stored
// back by stochastic rounding with the element's Philox bits, as the CPU does. The multi-tensor form
// gives each long run of segments that ops/adamw.cpp coalesced a contiguous sweep of its own: on an
// H100 a GPT-2 124M update is bandwidth-bound, and the chunked single-launch variants tried (chunk
// tables in the parameter block, a block per chunk) ran 1.4x to 3.4x slower (bench/results/README.md).
// Runs of at most kShortRun elements (GPT-2's biases and norm weights, half its 98 runs, 2.2 us a launch
// on an H200) go up to kRunsPerLaunch a launch instead, in the kernel's parameters, a block each.
#include <type_traits>

#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int64_t kShortRun = 4096;  // elements: a block of kBlock threads takes 16 each
constexpr int kRunsPerLaunch = 32;   // 2 KB of kernel parameters

struct ShortRuns {
  AdamWSegment run[kRunsPerLaunch];
};

// --- kernels ---

// Element i of a segment. T = float writes no mirror. M: the moments' type, float or __nv_bfloat16
// (then `segment` gives the rounding keys); pointers are already offset to the segment.
template <typename T, typename M>
__device__ __forceinline__ void update_element(float* __restrict__ param, const float* __restrict__ grad,
                                               M* __restrict__ m, M* __restrict__ v, T* __restrict__ mirror,
                                               const AdamWSegment& segment, const AdamWElementParams& p, int64_t i) {
  float value = param[i];
  if constexpr (std::is_same_v<M, float>) {
    adamw_element(value, grad[i], m[i], v[i], p);
  } else {
    static_assert(std::is_same_v<M, __nv_bfloat16>, "moments are float or __nv_bfloat16");
    __nv_bfloat16_raw m_raw = m[i], v_raw = v[i];
    adamw_element_bf16_moments(value, grad[i], m_raw.x, v_raw.x, p, adamw_rounding_key(segment, i));
    m[i] = m_raw;
    v[i] = v_raw;
  }
  param[i] = value;
  if constexpr (!std::is_same_v<T, float>) mirror[i] = store_as<T>(value);
}

// A thread per element of one segment.
template <typename T, typename M>
__global__ void adamw_update_kernel(float* __restrict__ param, const float* __restrict__ grad, M* __restrict__ m,
                                    M* __restrict__ v, T* __restrict__ mirror, AdamWSegment segment,
                                    AdamWElementParams p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < segment.length) update_element<T, M>(param, grad, m, v, mirror, segment, p, i);
}

// A block per short run of `runs`, its threads striding over the run; pointers at the whole buffers.
// The runs are disjoint (a partition of the parameters), so the blocks may update them at once.
template <typename T, typename M>
__global__ void adamw_short_runs_kernel(float* param, const float* grad, M* m, M* v, T* mirror,
                                        const __grid_constant__ ShortRuns runs, AdamWElementParams decayed,
                                        AdamWElementParams plain) {
  const AdamWSegment& s = runs.run[blockIdx.x];
  const AdamWElementParams& p = s.decayed ? decayed : plain;
#pragma unroll 4  // up to 16 elements a thread: their loads in flight together, not one after another
  for (int64_t i = threadIdx.x; i < s.length; i += blockDim.x)
    update_element<T, M>(param + s.param_offset, grad + s.state_offset, m + s.state_offset, v + s.state_offset,
                         mirror ? mirror + s.param_offset : nullptr, s, p, i);
}

template <typename T, typename M>
void launch_update(float* param, const float* grad, M* m, M* v, T* mirror, const AdamWSegment& segment,
                   const AdamWElementParams& p, cudaStream_t stream) {
  if (segment.length == 0) return;
  adamw_update_kernel<T, M><<<ceil_div(segment.length, kBlock), kBlock, 0, stream>>>(param, grad, m, v, mirror,
                                                                                     segment, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// --- launchers ---

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWElementParams& p,
                  cudaStream_t stream) {
  AdamWSegment whole;
  whole.length = n;
  launch_update<float, float>(param, grad, m, v, nullptr, whole, p, stream);
}

template <typename T, typename M>
void adamw_update_segments(float* param, const float* grad, M* m, M* v, T* mirror, const AdamWSegment* segments,
                           int64_t count, const AdamWElementParams& decayed, const AdamWElementParams& plain,
                           cudaStream_t stream) {
  ShortRuns runs;
  int batched = 0;
  const auto flush = [&] {
    if (batched == 0) return;
    adamw_short_runs_kernel<T, M><<<batched, kBlock, 0, stream>>>(param, grad, m, v, mirror, runs, decayed, plain);
    CUDA_CHECK_LAUNCH();
    batched = 0;
  };
  for (int64_t k = 0; k < count; ++k) {
    const AdamWSegment& s = segments[k];
    if (s.length == 0) continue;
    if (s.length <= kShortRun) {
      runs.run[batched++] = s;
      if (batched == kRunsPerLaunch) flush();
      continue;
    }
    launch_update<T, M>(param + s.param_offset, grad + s.state_offset, m + s.state_offset, v + s.state_offset,
                        mirror ? mirror + s.param_offset : nullptr, s, s.decayed ? decayed : plain, stream);
  }
  flush();
}

#define TESSERA_ADAMW_SEGMENTS(T, M)                                                                             \
  template void adamw_update_segments<T, M>(float*, const float*, M*, M*, T*, const AdamWSegment*, int64_t, \
                                            const AdamWElementParams&, const AdamWElementParams&, cudaStream_t);
TESSERA_ADAMW_SEGMENTS(float, float)
TESSERA_ADAMW_SEGMENTS(__nv_bfloat16, float)
TESSERA_ADAMW_SEGMENTS(__half, float)
TESSERA_ADAMW_SEGMENTS(float, __nv_bfloat16)
TESSERA_ADAMW_SEGMENTS(__nv_bfloat16, __nv_bfloat16)
TESSERA_ADAMW_SEGMENTS(__half, __nv_bfloat16)
#undef TESSERA_ADAMW_SEGMENTS

}  // namespace tessera::cuda
