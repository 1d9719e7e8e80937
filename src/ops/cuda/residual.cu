// Residual connection on the GPU, elementwise, storage T = float, bf16 or
// fp16, fp32 arithmetic:
// out = a + b, and the in-place accumulation acc += x that carries its gradient to both branches.
// Each thread takes W consecutive elements: 16 bytes when every pointer is 16-byte aligned, else 1;
// the result of an element does not depend on W.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/residual_cuda.h"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

// Elements [i, i + W) of the thread, i = thread index * W; the last, partial group one by one.
template <typename T, int W>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  if (i + W <= n) {
    float va[W], vb[W];
    load_f32_vec(va, a + i);
    load_f32_vec(vb, b + i);
#pragma unroll
    for (int k = 0; k < W; k++) va[k] += vb[k];
    store_f32_vec(out + i, va);
  } else {
    for (int64_t j = i; j < n; j++) out[j] = store_as<T>(load_f32(a[j]) + load_f32(b[j]));
  }
}

template <typename T, int W>
__global__ void add_inplace_kernel(T* acc, const T* x, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  if (i + W <= n) {
    float va[W], vx[W];
    load_f32_vec(va, acc + i);
    load_f32_vec(vx, x + i);
#pragma unroll
    for (int k = 0; k < W; k++) va[k] += vx[k];
    store_f32_vec(acc + i, va);
  } else {
    for (int64_t j = i; j < n; j++) acc[j] = store_as<T>(load_f32(acc[j]) + load_f32(x[j]));
  }
}

template <int W>
unsigned blocks_for(int64_t n) {
  return unsigned(ceil_div(ceil_div(n, W), kBlock));
}

}  // namespace

// --- launchers ---

template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (is_aligned16(out) && is_aligned16(a) && is_aligned16(b))
    residual_forward_kernel<T, kVec<T>><<<blocks_for<kVec<T>>(n), kBlock, 0, stream>>>(out, a, b, n);
  else
    residual_forward_kernel<T, 1><<<blocks_for<1>(n), kBlock, 0, stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void add_inplace(T* acc, const T* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (is_aligned16(acc) && is_aligned16(x))
    add_inplace_kernel<T, kVec<T>><<<blocks_for<kVec<T>>(n), kBlock, 0, stream>>>(acc, x, n);
  else
    add_inplace_kernel<T, 1><<<blocks_for<1>(n), kBlock, 0, stream>>>(acc, x, n);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                              \
  template void residual_forward<T>(T*, const T*, const T*, int64_t, cudaStream_t); \
  template void add_inplace<T>(T*, const T*, int64_t, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
