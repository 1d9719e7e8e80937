// Fused AdamW on the GPU: one thread per element reads param, grad, m, v once and writes param,
// m, v once, fp32 throughout: the element update is ops/adamw_element.h, shared with the CPU.
#include "ops/adamw_element.h"
#include "ops/cuda/adamw_cuda.h"
#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kBlock = 256;

// --- kernels ---

__global__ void adamw_update_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                                    AdamWElementParams p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) adamw_element(param[i], grad[i], m[i], v[i], p);
}

}  // namespace

// --- launchers ---

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, float bias1, float bias2,
                  cudaStream_t stream) {
  if (n == 0) return;
  const AdamWElementParams p{lr, beta1, beta2, eps, weight_decay, grad_scale, bias1, bias2};
  adamw_update_kernel<<<ceil_div(n, kBlock), kBlock, 0, stream>>>(param, grad, m, v, n, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::cuda
