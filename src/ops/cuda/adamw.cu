// Fused AdamW on the GPU: one thread per element reads param, grad, m, v once and writes param,
// m, v once, fp32 throughout (the same arithmetic as cpu/adamw_cpu.cpp):
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param -= lr * ((m / bias1) / (sqrt(v / bias2) + eps) + weight_decay * param)
#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

__global__ void adamw_update_kernel(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                                    float bias1, float bias2) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grad[i] * grad_scale;
  const float m_i = beta1 * m[i] + (1.0f - beta1) * g;
  const float v_i = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = m_i;
  v[i] = v_i;
  const float m_hat = m_i / bias1, v_hat = v_i / bias2;
  const float p = param[i];
  param[i] = p - lr * (m_hat / (sqrtf(fmaxf(v_hat, 0.0f)) + eps) + weight_decay * p);
}

}  // namespace

// --- launchers ---

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, float bias1, float bias2,
                  cudaStream_t stream) {
  if (n == 0) return;
  adamw_update_kernel<<<ceil_div(n, kBlock), kBlock, 0, stream>>>(param, grad, m, v, n, lr, beta1, beta2, eps,
                                                                  weight_decay, grad_scale, bias1, bias2);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
