// GELU (tanh approximation) on the GPU, elementwise, storage T = float, bf16 or fp16, fp32
// arithmetic:
//   gelu(x) = 0.5 x (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx.  dx is written, not accumulated.
// Each thread takes W consecutive elements: 16 bytes when every pointer is 16-byte aligned, else 1;
// the result of an element does not depend on W.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/gelu_cuda.h"
#include "ops/cuda/gelu_tanh.cuh"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ float gelu(float x) { return gelu_tanh(x); }

__device__ __forceinline__ float gelu_backward_of(float dout, float x) { return dout * gelu_tanh_derivative(x); }

// --- kernels ---

// Elements [i, i + W) of the thread, i = thread index * W; the last, partial group one by one.
template <typename T, int W>
__global__ void gelu_forward_kernel(T* out, const T* x, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  if (i + W <= n) {
    float v[W];
    load_f32_vec(v, x + i);
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = gelu(v[k]);
    store_f32_vec(out + i, v);
  } else {
    for (int64_t j = i; j < n; j++) out[j] = store_as<T>(gelu(load_f32(x[j])));
  }
}

template <typename T, int W>
__global__ void gelu_backward_kernel(T* dx, const T* dout, const T* x, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  if (i + W <= n) {
    float d[W], v[W];
    load_f32_vec(d, dout + i);
    load_f32_vec(v, x + i);
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = gelu_backward_of(d[k], v[k]);
    store_f32_vec(dx + i, v);
  } else {
    for (int64_t j = i; j < n; j++) dx[j] = store_as<T>(gelu_backward_of(load_f32(dout[j]), load_f32(x[j])));
  }
}

template <int W>
unsigned blocks_for(int64_t n) {
  return unsigned(ceil_div(ceil_div(n, W), kBlock));
}

}  // namespace

// --- launchers ---

template <typename T>
void gelu_forward(T* out, const T* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (is_aligned16(out) && is_aligned16(x))
    gelu_forward_kernel<T, kVec<T>><<<blocks_for<kVec<T>>(n), kBlock, 0, stream>>>(out, x, n);
  else
    gelu_forward_kernel<T, 1><<<blocks_for<1>(n), kBlock, 0, stream>>>(out, x, n);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_backward(T* dx, const T* dout, const T* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (is_aligned16(dx) && is_aligned16(dout) && is_aligned16(x))
    gelu_backward_kernel<T, kVec<T>><<<blocks_for<kVec<T>>(n), kBlock, 0, stream>>>(dx, dout, x, n);
  else
    gelu_backward_kernel<T, 1><<<blocks_for<1>(n), kBlock, 0, stream>>>(dx, dout, x, n);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                              \
  template void gelu_forward<T>(T*, const T*, int64_t, cudaStream_t);               \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
