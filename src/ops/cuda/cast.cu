// f32 <-> bf16 conversion on the GPU: a grid-stride loop, one element per thread per iteration.
// Memory-bound (6 bytes per element); the rounding is __float2bfloat16_rn, round to nearest even.
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

template <typename To, typename From>
void launch_cast(To* dst, const From* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(n, kBlock), 132 * 16);
  cast_kernel<<<blocks, kBlock, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// --- launchers ---

void cast_copy(__nv_bfloat16* dst, const float* src, int64_t n, cudaStream_t stream) {
  launch_cast(dst, src, n, stream);
}

void cast_copy(float* dst, const __nv_bfloat16* src, int64_t n, cudaStream_t stream) {
  launch_cast(dst, src, n, stream);
}

}  // namespace tessera::cuda
