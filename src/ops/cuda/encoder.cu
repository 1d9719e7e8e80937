// Token + position embedding on the GPU, fp32, one thread per output element (b,t,c):
//   forward:  out[b,t,c] = wte[tokens[b,t],c] + wpe[t,c]
//   backward: dwpe[t,c] += sum_b dout[b,t,c]   one thread per (t,c), b in order: deterministic;
//             dwte[tokens[b,t],c] += dout[b,t,c]   atomics: a token repeated in the batch adds in
//             an unspecified order (a sorted, deterministic scheme is future work).
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/encoder_cuda.h"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

__global__ void encoder_forward_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                       int64_t BT, int64_t T, int64_t C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C, t = bt % T;
  out[i] = wte[int64_t(tokens[bt]) * C + c] + wpe[t * C + c];
}

__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // t * C + c
  if (i >= T * C) return;
  float sum = 0.0f;
  for (int64_t b = 0; b < B; b++) sum += dout[b * T * C + i];
  dwpe[i] += sum;
}

__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int32_t* tokens, int64_t BT,
                                            int64_t C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C;
  atomicAdd(&dwte[int64_t(tokens[bt]) * C + c], dout[i]);
}

}  // namespace

// --- launchers ---

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                     int64_t C, cudaStream_t stream) {
  const int64_t n = B * T * C;
  if (n == 0) return;
  encoder_forward_kernel<<<ceil_div(n, kBlock), kBlock, 0, stream>>>(out, tokens, wte, wpe, B * T, T, C);
  CUDA_CHECK_LAUNCH();
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                      int64_t C, cudaStream_t stream) {
  if (B * T * C == 0) return;
  encoder_backward_wpe_kernel<<<ceil_div(T * C, kBlock), kBlock, 0, stream>>>(dwpe, dout, B, T, C);
  CUDA_CHECK_LAUNCH();
  encoder_backward_wte_kernel<<<ceil_div(B * T * C, kBlock), kBlock, 0, stream>>>(dwte, dout, tokens, B * T, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
