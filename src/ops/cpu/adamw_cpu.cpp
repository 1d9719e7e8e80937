// AdamW on the CPU: one fused, vectorised pass over the elements, parallel when large.
#include "ops/cpu/adamw_cpu.h"

#include "ops/adamw_element.h"
#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, float bias1, float bias2) {
  const AdamWElementParams p{lr, beta1, beta2, eps, weight_decay, grad_scale, bias1, bias2};
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) adamw_element(param[i], grad[i], m[i], v[i], p);
}

}  // namespace tessera::cpu
