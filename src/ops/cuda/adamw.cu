// Fused AdamW on the GPU, fp32 throughout: the element update is ops/adamw_element.h, shared with
// the CPU. One thread per element reads param, grad, m, v once and writes param, m, v once (and the
// optional 16-bit mirror of param). The multi-tensor form launches this kernel once per run of
// segments that ops/adamw.cpp coalesced (98 for GPT-2 124M): on an H100 a GPT-2 124M update is
// bandwidth-bound either way, and the chunked single-launch variants tried (chunk tables in the
// parameter block, a block per chunk) ran 1.4x to 3.4x slower than one contiguous sweep per segment
// (148 then; bench/results/README.md).
#include <type_traits>

#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

// T = float writes no mirror.
template <typename T>
__global__ void adamw_update_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                                    float* __restrict__ v, T* __restrict__ mirror, int64_t n, AdamWElementParams p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float value = param[i];
  adamw_element(value, grad[i], m[i], v[i], p);
  param[i] = value;
  if constexpr (!std::is_same_v<T, float>) mirror[i] = store_as<T>(value);
}

template <typename T>
void launch_update(float* param, const float* grad, float* m, float* v, T* mirror, int64_t n,
                   const AdamWElementParams& p, cudaStream_t stream) {
  if (n == 0) return;
  adamw_update_kernel<T><<<ceil_div(n, kBlock), kBlock, 0, stream>>>(param, grad, m, v, mirror, n, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// --- launchers ---

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWElementParams& p,
                  cudaStream_t stream) {
  launch_update<float>(param, grad, m, v, nullptr, n, p, stream);
}

template <typename T>
void adamw_update_segments(float* param, const float* grad, float* m, float* v, T* mirror,
                           const AdamWSegment* segments, int64_t count, const AdamWElementParams& decayed,
                           const AdamWElementParams& plain, cudaStream_t stream) {
  for (int64_t k = 0; k < count; ++k) {
    const AdamWSegment& s = segments[k];
    launch_update<T>(param + s.param_offset, grad + s.state_offset, m + s.state_offset, v + s.state_offset,
                     mirror ? mirror + s.param_offset : nullptr, s.length, s.decayed ? decayed : plain, stream);
  }
}

template void adamw_update_segments<float>(float*, const float*, float*, float*, float*, const AdamWSegment*, int64_t,
                                           const AdamWElementParams&, const AdamWElementParams&, cudaStream_t);
template void adamw_update_segments<__nv_bfloat16>(float*, const float*, float*, float*, __nv_bfloat16*,
                                                   const AdamWSegment*, int64_t, const AdamWElementParams&,
                                                   const AdamWElementParams&, cudaStream_t);
template void adamw_update_segments<__half>(float*, const float*, float*, float*, __half*, const AdamWSegment*,
                                            int64_t, const AdamWElementParams&, const AdamWElementParams&,
                                            cudaStream_t);

}  // namespace tessera::cuda
