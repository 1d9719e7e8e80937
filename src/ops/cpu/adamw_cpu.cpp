// AdamW on the CPU: one fused, vectorised pass over the elements, parallel when large.
#include "ops/cpu/adamw_cpu.h"

#include <cmath>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, float bias1, float bias2) {
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) {
    const float g = grad[i] * grad_scale;
    const float m_i = beta1 * m[i] + (1.0f - beta1) * g;
    const float v_i = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = m_i;
    v[i] = v_i;
    const float m_hat = m_i / bias1, v_hat = v_i / bias2;
    param[i] -= lr * (m_hat / (std::sqrt(std::max(v_hat, 0.0f)) + eps) + weight_decay * param[i]);
  }
}

}  // namespace tessera::cpu
