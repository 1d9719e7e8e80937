// SwiGLU and GeGLU on the GPU, elementwise over the (N,F) gate/up pairs of h (N,2F) = [gate | up],
// storage T = float, bf16 or fp16, fp32 arithmetic:
//   out = act(g) * u,  SwiGLU's act silu(g) = g * sigmoid(g),  sigmoid(g) = 1 / (1 + expf(-g)),
//   GeGLU's GELU's tanh form (gelu_tanh.cuh)
//   dgate = dout * u * act'(g),  silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))),  dup = dout * act(g);
//   dh is written.
// expf where the CPU has exp_approx (within 2.5e-7 relative of exp): results agree to a few fp32
// ulp. Far negative g gives expf(-g) = inf, sigmoid 0, silu -0: no NaN.
// Each thread takes W consecutive pairs of one row: 16 bytes when F is a multiple of kVec<T> and
// every pointer is 16-byte aligned, else 1; the result of an element does not depend on W.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/gelu_tanh.cuh"
#include "ops/cuda/swiglu_cuda.h"
#include "ops/cuda/vector_io.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// The gate activation act(g) and act'(g): silu, or with kGelu GELU's tanh form.
template <bool kGelu>
__device__ __forceinline__ float gate_value(float g) {
  if constexpr (kGelu) return gelu_tanh(g);
  return g * sigmoid(g);
}
template <bool kGelu>
__device__ __forceinline__ float gate_derivative(float g) {
  if constexpr (kGelu) return gelu_tanh_derivative(g);
  const float sg = sigmoid(g);
  return sg * (1.0f + g * (1.0f - sg));
}

// --- kernels ---

// Pairs [f, f + W) of row n, where n * F + f = thread index * W (W divides F, so a group never
// straddles two rows).
template <typename T, int W, bool kGelu>
__global__ void swiglu_forward_kernel(T* out, const T* h, int64_t N, int64_t F) {
  const int64_t e = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  if (e >= N * F) return;
  const int64_t n = e / F, f = e % F;
  const T* gate = h + n * 2 * F + f;  // (W)
  const T* up = gate + F;             // (W)
  float g[W], u[W];
  load_f32_vec(g, gate);
  load_f32_vec(u, up);
#pragma unroll
  for (int k = 0; k < W; k++) g[k] = gate_value<kGelu>(g[k]) * u[k];
  store_f32_vec(out + e, g);
}

template <typename T, int W, bool kGelu>
__global__ void swiglu_backward_kernel(T* dh, const T* dout, const T* h, int64_t N, int64_t F) {
  const int64_t e = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * W;
  if (e >= N * F) return;
  const int64_t n = e / F, f = e % F;
  const T* gate = h + n * 2 * F + f;  // (W)
  const T* up = gate + F;             // (W)
  T* dgate = dh + n * 2 * F + f;      // (W)
  T* dup = dgate + F;                 // (W)
  float d[W], g[W], u[W], dg[W], du[W];
  load_f32_vec(d, dout + e);
  load_f32_vec(g, gate);
  load_f32_vec(u, up);
#pragma unroll
  for (int k = 0; k < W; k++) {
    dg[k] = d[k] * u[k] * gate_derivative<kGelu>(g[k]);
    du[k] = d[k] * gate_value<kGelu>(g[k]);
  }
  store_f32_vec(dgate, dg);
  store_f32_vec(dup, du);
}

template <int W>
unsigned blocks_for(int64_t pairs) {
  return unsigned(ceil_div(pairs / W, kBlock));
}

template <typename T, bool kGelu>
void forward_launch(T* out, const T* h, int64_t N, int64_t F, cudaStream_t stream) {
  if (F % kVec<T> == 0 && is_aligned16(out) && is_aligned16(h))
    swiglu_forward_kernel<T, kVec<T>, kGelu><<<blocks_for<kVec<T>>(N * F), kBlock, 0, stream>>>(out, h, N, F);
  else
    swiglu_forward_kernel<T, 1, kGelu><<<blocks_for<1>(N * F), kBlock, 0, stream>>>(out, h, N, F);
}

template <typename T, bool kGelu>
void backward_launch(T* dh, const T* dout, const T* h, int64_t N, int64_t F, cudaStream_t stream) {
  if (F % kVec<T> == 0 && is_aligned16(dh) && is_aligned16(dout) && is_aligned16(h))
    swiglu_backward_kernel<T, kVec<T>, kGelu><<<blocks_for<kVec<T>>(N * F), kBlock, 0, stream>>>(dh, dout, h, N, F);
  else
    swiglu_backward_kernel<T, 1, kGelu><<<blocks_for<1>(N * F), kBlock, 0, stream>>>(dh, dout, h, N, F);
}

}  // namespace

// --- launchers ---

template <typename T>
void swiglu_forward(T* out, const T* h, int64_t N, int64_t F, bool gelu, cudaStream_t stream) {
  if (N * F == 0) return;
  if (gelu)
    forward_launch<T, true>(out, h, N, F, stream);
  else
    forward_launch<T, false>(out, h, N, F, stream);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void swiglu_backward(T* dh, const T* dout, const T* h, int64_t N, int64_t F, bool gelu, cudaStream_t stream) {
  if (N * F == 0) return;
  if (gelu)
    backward_launch<T, true>(dh, dout, h, N, F, stream);
  else
    backward_launch<T, false>(dh, dout, h, N, F, stream);
  CUDA_CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                               \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t, bool, cudaStream_t);               \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t, bool, cudaStream_t);
TS_FOR_EACH_STORAGE_TYPE(INSTANTIATE)

}  // namespace tessera::cuda
