// GELU (tanh approximation) on the GPU, one thread per element, fp32:
//   gelu(x) = 0.5 x (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx.  dx is written, not accumulated.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/gelu_cuda.h"

namespace tessera::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kCubic = 0.044715f;
constexpr int kBlock = 256;

// --- kernels ---

__global__ void gelu_forward_kernel(float* out, const float* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float xi = x[i];
  const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
  out[i] = 0.5f * xi * (1.0f + tanhf(u));
}

__global__ void gelu_backward_kernel(float* dx, const float* dout, const float* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float xi = x[i];
  const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
  const float th = tanhf(u);
  const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kCubic * xi * xi);
  dx[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * xi * (1.0f - th * th) * du_dx);
}

}  // namespace

// --- launchers ---

void gelu_forward(float* out, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<ceil_div(n, kBlock), kBlock, 0, stream>>>(out, x, n);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<ceil_div(n, kBlock), kBlock, 0, stream>>>(dx, dout, x, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
