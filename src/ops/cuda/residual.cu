// Residual connection on the GPU, one thread per element, fp32: out = a + b, and the in-place
// accumulation acc += x that carries its gradient to both branches.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/residual_cuda.h"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void add_inplace_kernel(float* acc, const float* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += x[i];
}

}  // namespace

// --- launchers ---

void residual_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_forward_kernel<<<ceil_div(n, kBlock), kBlock, 0, stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

void add_inplace(float* acc, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_inplace_kernel<<<ceil_div(n, kBlock), kBlock, 0, stream>>>(acc, x, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
