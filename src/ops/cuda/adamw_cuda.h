// CUDA launchers of the fused AdamW update (contract in ops/adamw.h).
// Raw device pointers, fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// One step over n elements of param, grad, m, v. bias1 = 1 - beta1^step, bias2 = 1 - beta2^step.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, float bias1, float bias2,
                  cudaStream_t stream);

}  // namespace tessera::cuda
