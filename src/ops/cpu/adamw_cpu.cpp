// AdamW on the CPU: one fused, vectorised pass over the elements, parallel when large; the bf16-moment
// form draws each element's rounding bits from its key (not vectorised: Philox per element).
#include "ops/cpu/adamw_cpu.h"

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, float bias1, float bias2) {
  const AdamWElementParams p{lr, beta1, beta2, eps, weight_decay, grad_scale, bias1, bias2};
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) adamw_element(param[i], grad[i], m[i], v[i], p);
}

void adamw_update_bf16_moments(float* param, const float* grad, bf16* m, bf16* v, const AdamWSegment& s,
                               const AdamWElementParams& p) {
  const int64_t n = s.length;
  if (s.key_cols == 0) {  // contiguous keys: a loop without branches, which GCC vectorises
    const uint64_t first = uint64_t(s.key_offset);
#pragma omp parallel for simd if (n >= kMinParallelElements)
    for (int64_t i = 0; i < n; i++)
      adamw_element_bf16_moments(param[i], grad[i], m[i].bits, v[i].bits, p, first + uint64_t(i));
    return;
  }
#pragma omp parallel for if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++)
    adamw_element_bf16_moments(param[i], grad[i], m[i].bits, v[i].bits, p, adamw_rounding_key(s, i));
}

}  // namespace tessera::cpu
