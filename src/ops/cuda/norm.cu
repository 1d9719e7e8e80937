// Gradient-clipping reductions on the GPU. squared_norm: a fixed grid of kBlocks blocks strides
// over x summing squares in fp64, 16 bytes a load where x is aligned and n a multiple of 4 (four
// loads in flight a thread); block partials go to scratch, one block adds them in index order. The
// grid never depends on the device, so the result (which depends on n and on whether x is aligned)
// is the same bit for bit on every run.
// scale_inplace: one thread per element, storage T = float, bf16 or fp16 (fp32 arithmetic, rounded once).
#include "core/cuda/device.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/norm_cuda.h"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kBlocks = 512;  // partial sums; also the thread count of the final block

// --- kernels ---

// partial (kBlocks) = per-block sum of x[i]^2, W elements a load (W = 4: x 16-byte aligned, n a
// multiple of 4).
template <int W>
__global__ void squared_norm_partial_kernel(double* partial, const float* x, int64_t n) {
  __shared__ double scratch[kWarpSize];
  double sum = 0.0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * W;
#pragma unroll 4
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W; i < n; i += stride) {
    float v[W];
    load_f32_vec<W>(v, x + i);
#pragma unroll
    for (int k = 0; k < W; k++) sum += double(v[k]) * double(v[k]);
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// out (1) = sum of partial (kBlocks), launched with kBlocks threads.
__global__ void squared_norm_final_kernel(double* out, const double* partial) {
  __shared__ double scratch[kWarpSize];
  const double sum = block_sum(partial[threadIdx.x], scratch);
  if (threadIdx.x == 0) *out = sum;
}

template <typename T>
__global__ void scale_inplace_kernel(T* x, int64_t n, float factor) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v[1];
  load_f32_vec(v, x + i);
  v[0] *= factor;
  store_f32_vec(x + i, v);
}

}  // namespace

// --- launchers ---

double squared_norm(const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0.0;
  const DeviceScratch buffer((kBlocks + 1) * sizeof(double));
  double* scratch = buffer.as<double>();  // (kBlocks) partials, then the total
  if (is_aligned16(x) && n % 4 == 0)
    squared_norm_partial_kernel<4><<<kBlocks, kBlock, 0, stream>>>(scratch, x, n);
  else
    squared_norm_partial_kernel<1><<<kBlocks, kBlock, 0, stream>>>(scratch, x, n);
  CUDA_CHECK_LAUNCH();
  squared_norm_final_kernel<<<1, kBlocks, 0, stream>>>(scratch + kBlocks, scratch);
  CUDA_CHECK_LAUNCH();
  double total = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&total, scratch + kBlocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return total;
}

template <typename T>
void scale_inplace(T* x, int64_t n, float factor, cudaStream_t stream) {
  if (n == 0) return;
  scale_inplace_kernel<T><<<ceil_div(n, kBlock), kBlock, 0, stream>>>(x, n, factor);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T) template void scale_inplace<T>(T*, int64_t, float, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
