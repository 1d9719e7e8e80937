// One element of the AdamW update, shared by the CPU loop and the CUDA kernel so both do exactly
// the same fp32 arithmetic (see ops/adamw.h for the formula). bias1/bias2 = 1 - beta^step. Also the
// segment a multi-tensor update covers, shared by the op and its CUDA launcher, and the bf16-moment
// form: fp32 arithmetic, the moments stored back by stochastic rounding with Philox bits keyed on
// the element's place in the whole model, so every layout and both devices draw the same bits.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/host_device.h"
#include "core/philox.h"
#include "core/stochastic_rounding.h"

namespace tessera {

// param[param_offset, +length) is updated from grad, m and v at [state_offset, +length); weight
// decay applies when `decayed`. The rounding key (needed for bf16 moments only) is element i's place
// in the whole model, whatever slice of it this rank holds: key_offset + i for a run contiguous in the
// whole model (key_cols = 0), or for a column slice of a matrix, rows of key_cols elements key_stride
// apart, the segment starting key_col elements into its first row.
struct AdamWSegment {
  int64_t param_offset = 0;
  int64_t state_offset = 0;
  int64_t length = 0;
  bool decayed = false;
  int64_t key_offset = -1;  // -1: no rounding key
  int64_t key_col = 0, key_cols = 0, key_stride = 0;
  TS_HOST_DEVICE bool keyed() const { return key_offset >= 0; }
  // Keyed, and a strided key's rows fit their stride: what bf16 moments need.
  bool rounding_key_valid() const {
    return keyed() && (key_cols == 0 || (key_cols > 0 && key_stride >= key_cols && key_col >= 0));
  }
};

// The rounding key of element i of segment s.
TS_HOST_DEVICE inline uint64_t adamw_rounding_key(const AdamWSegment& s, int64_t i) {
  if (s.key_cols == 0) return uint64_t(s.key_offset + i);
  const int64_t at = s.key_col + i;
  return uint64_t(s.key_offset + at / s.key_cols * s.key_stride + at % s.key_cols);
}

// round_seed and round_stream (the step) key the stochastic rounding of bf16 moments.
struct AdamWElementParams {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, bias1, bias2;
  uint64_t round_seed = 0, round_stream = 0;
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

// The same update with the moments held as bf16 bits: widened, updated in fp32 (the parameter sees
// the unrounded moments), then rounded stochastically, m by Philox word 0 and v by word 1.
TS_HOST_DEVICE inline void adamw_element_bf16_moments(float& param, float grad, uint16_t& m_bits, uint16_t& v_bits,
                                                       const AdamWElementParams& p, uint64_t key) {
  const uint32_t m_wide = uint32_t(m_bits) << 16, v_wide = uint32_t(v_bits) << 16;
  float m, v;
  memcpy(&m, &m_wide, sizeof m);
  memcpy(&v, &v_wide, sizeof v);
  adamw_element(param, grad, m, v, p);
  const PhiloxWords r = philox4x32(p.round_seed, p.round_stream, key);
  m_bits = bf16_bits_stochastic(m, r.w[0]);
  v_bits = bf16_bits_stochastic(v, r.w[1]);
}

}  // namespace tessera
