// Fused AdamW on the GPU, fp32 arithmetic: the element update is ops/adamw_element.h, shared with
// the CPU. One thread per element reads param, grad, m, v once and writes param, m, v once (and the
// optional 16-bit mirror of param); bf16 moments (M = __nv_bfloat16) are widened, updated and stored
// back by stochastic rounding with the element's Philox bits, as the CPU does. The multi-tensor form
// launches this kernel once per run of segments that ops/adamw.cpp coalesced (98 for GPT-2 124M): on
// an H100 a GPT-2 124M update is bandwidth-bound either way, and the chunked single-launch variants
// tried (chunk tables in the parameter block, a block per chunk) ran 1.4x to 3.4x slower than one
// contiguous sweep per segment (148 then; bench/results/README.md).
#include <type_traits>

#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

// T = float writes no mirror. M: the moments' type, float or __nv_bfloat16 (then `segment` gives the
// rounding keys; pointers are already offset to the segment).
template <typename T, typename M>
__global__ void adamw_update_kernel(float* __restrict__ param, const float* __restrict__ grad, M* __restrict__ m,
                                    M* __restrict__ v, T* __restrict__ mirror, AdamWSegment segment,
                                    AdamWElementParams p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= segment.length) return;
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
  for (int64_t k = 0; k < count; ++k) {
    const AdamWSegment& s = segments[k];
    launch_update<T, M>(param + s.param_offset, grad + s.state_offset, m + s.state_offset, v + s.state_offset,
                        mirror ? mirror + s.param_offset : nullptr, s, s.decayed ? decayed : plain, stream);
  }
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
