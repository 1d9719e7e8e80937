// fp8 fake-quantize on the GPU, storage T = float, bf16 or fp16, fp32 arithmetic (contract in
// ops/fp8_quantize.h): a grid-stride loop over groups of W elements (16 bytes when both pointers are
// aligned, else 1) writes out and keeps each thread's largest |x| key; a block reduction and one
// atomicMax per block on amax's bits as int fold the keys in. Also the test-only launchers that run
// core/fp8.h's conversions beside <cuda_fp8.h>'s on the device.
#include <cuda_fp8.h>

#include "core/fp8.h"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/fp8_quantize_cuda.h"
#include "ops/cuda/vector_io.cuh"
#include "ops/fp8_quantize_element.h"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = 132 * 16;  // enough to fill an H100; more only adds atomics

__device__ __forceinline__ int32_t max_key(int32_t a, int32_t b) { return a > b ? a : b; }

__device__ inline int32_t warp_max_key(int32_t v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = max_key(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// --- kernels ---

// Thread t takes groups t, t + stride, ... of W elements, then element groups * W + t of the last
// n mod W. Keys start at 0, which no |x| key is below, so a block without elements changes nothing.
template <typename T, int W, Fp8Format F>
__global__ void fp8_quantize_dequantize_kernel(T* out, const T* x, int64_t n, float scale, float* amax) {
  __shared__ int32_t scratch[kBlock / kWarpSize];
  const int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t groups = n / W;
  int32_t key = 0;
  for (int64_t g = thread; g < groups; g += stride) {
    float v[W];
    load_f32_vec(v, x + g * W);
#pragma unroll
    for (int k = 0; k < W; k++) {
      key = max_key(key, fp8_amax_key(v[k]));
      v[k] = fp8_quantize_dequantize_element(v[k], F, scale);
    }
    store_f32_vec(out + g * W, v);
  }
  if (const int64_t j = groups * W + thread; j < n) {
    const float v = load_f32(x[j]);
    key = max_key(key, fp8_amax_key(v));
    out[j] = store_as<T>(fp8_quantize_dequantize_element(v, F, scale));
  }
  key = warp_max_key(key);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) scratch[warp] = key;
  __syncthreads();
  if (warp == 0) {
    key = warp_max_key(lane < kBlock / kWarpSize ? scratch[lane] : 0);
    if (lane == 0) atomicMax(reinterpret_cast<int*>(amax), key);
  }
}

__device__ __forceinline__ __nv_fp8_interpretation_t cuda_interpretation(Fp8Format format) {
  return format == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
}

__global__ void fp8_encode_beside_cuda_kernel(int32_t* cuda_codes, int32_t* our_codes, const float* x, int64_t n,
                                              Fp8Format format) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  cuda_codes[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, cuda_interpretation(format));
  our_codes[i] = fp8_encode(x[i], format);
}

__global__ void fp8_decode_beside_cuda_kernel(float* cuda_values, float* our_values, Fp8Format format) {
  const int code = threadIdx.x;
  const __half_raw value = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), cuda_interpretation(format));
  cuda_values[code] = __half2float(__half(value));
  our_values[code] = fp8_decode(uint8_t(code), format);
}

template <typename T, int W, Fp8Format F>
void launch(T* out, const T* x, int64_t n, float scale, float* amax, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>(ceil_div(ceil_div(n, W), kBlock), kMaxBlocks);
  fp8_quantize_dequantize_kernel<T, W, F><<<unsigned(blocks), kBlock, 0, stream>>>(out, x, n, scale, amax);
}

template <typename T, Fp8Format F>
void launch_format(T* out, const T* x, int64_t n, float scale, float* amax, cudaStream_t stream) {
  if (is_aligned16(out) && is_aligned16(x))
    launch<T, kVec<T>, F>(out, x, n, scale, amax, stream);
  else
    launch<T, 1, F>(out, x, n, scale, amax, stream);
}

}  // namespace

// --- launchers ---

template <typename T>
void fp8_quantize_dequantize(T* out, const T* x, int64_t n, Fp8Format format, float scale, float* amax,
                             cudaStream_t stream) {
  if (n == 0) return;
  if (format == Fp8Format::e4m3)
    launch_format<T, Fp8Format::e4m3>(out, x, n, scale, amax, stream);
  else
    launch_format<T, Fp8Format::e5m2>(out, x, n, scale, amax, stream);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T) \
  template void fp8_quantize_dequantize<T>(T*, const T*, int64_t, Fp8Format, float, float*, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

void fp8_encode_beside_cuda(int32_t* cuda_codes, int32_t* our_codes, const float* x, int64_t n, Fp8Format format,
                            cudaStream_t stream) {
  if (n == 0) return;
  fp8_encode_beside_cuda_kernel<<<unsigned(ceil_div(n, kBlock)), kBlock, 0, stream>>>(cuda_codes, our_codes, x, n,
                                                                                      format);
  CUDA_CHECK_LAUNCH();
}

void fp8_decode_beside_cuda(float* cuda_values, float* our_values, Fp8Format format, cudaStream_t stream) {
  fp8_decode_beside_cuda_kernel<<<1, 256, 0, stream>>>(cuda_values, our_values, format);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
