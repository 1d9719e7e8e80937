// CPU kernel of the fused AdamW update (contract in ops/adamw.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "ops/adamw_element.h"

namespace tessera::cpu {

// One step over n elements of param, grad, m, v. bias1 = 1 - beta1^step, bias2 = 1 - beta2^step.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, float bias1, float bias2);
// One step over segment s's s.length elements, the moments held in bf16 (adamw_element_bf16_moments,
// keyed by the segment's rounding keys).
void adamw_update_bf16_moments(float* param, const float* grad, bf16* m, bf16* v, const AdamWSegment& s,
                               const AdamWElementParams& p);

}  // namespace tessera::cpu
