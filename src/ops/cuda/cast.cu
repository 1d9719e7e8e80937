// f32 <-> bf16 / fp16 conversion on the GPU: a grid-stride loop, one element per thread per
// iteration. Memory-bound (6 bytes per element); the rounding is round to nearest even.
#include "ops/cuda/cast_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

template <typename To, typename From>
__global__ void cast_kernel(To* dst, const From* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = store_as<To>(load_f32(src[i]));
}

}  // namespace

// --- launchers ---

template <typename To, typename From>
void cast_copy(To* dst, const From* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(n, kBlock), 132 * 16);
  cast_kernel<<<blocks, kBlock, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

template void cast_copy<__nv_bfloat16, float>(__nv_bfloat16*, const float*, int64_t, cudaStream_t);
template void cast_copy<float, __nv_bfloat16>(float*, const __nv_bfloat16*, int64_t, cudaStream_t);
template void cast_copy<__half, float>(__half*, const float*, int64_t, cudaStream_t);
template void cast_copy<float, __half>(float*, const __half*, int64_t, cudaStream_t);

}  // namespace tessera::cuda
