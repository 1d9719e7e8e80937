// One element of the AdamW update, shared by the CPU loop and the CUDA kernel so both do exactly
// the same fp32 arithmetic (see ops/adamw.h for the formula). bias1/bias2 = 1 - beta^step. Also the
// segment a multi-tensor update covers, shared by the op and its CUDA launcher.
#pragma once

#include <math.h>
#include <stdint.h>

#include "core/host_device.h"

namespace tessera {

// param[param_offset, +length) is updated from grad, m and v at [state_offset, +length); weight
// decay applies when `decayed`.
struct AdamWSegment {
  int64_t param_offset = 0;
  int64_t state_offset = 0;
  int64_t length = 0;
  bool decayed = false;
};

struct AdamWElementParams {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, bias1, bias2;
};

TS_HOST_DEVICE inline void adamw_element(float& param, float grad, float& m, float& v, const AdamWElementParams& p) {
  const float g = grad * p.grad_scale;
  const float m_i = p.beta1 * m + (1.0f - p.beta1) * g;
  const float v_i = p.beta2 * v + (1.0f - p.beta2) * g * g;
  m = m_i;
  v = v_i;
  const float m_hat = m_i / p.bias1, v_hat = v_i / p.bias2;
  // a select, not fmaxf: fmaxf's NaN rules keep GCC from vectorising the CPU loop
  param -= p.lr * (m_hat / (sqrtf(v_hat > 0.0f ? v_hat : 0.0f) + p.eps) + p.weight_decay * param);
}

}  // namespace tessera
