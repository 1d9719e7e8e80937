// AdamW over a flat parameter buffer: fp32 first and second moments in flat buffers with the
// parameters' layout. Weight decay applies only to parameters the layout marks as decayed (2+ dims).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "nn/named_tensor.h"
#include "nn/parameter_layout.h"

namespace tessera {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW {
 public:
  AdamW(const ParameterLayout& layout, const AdamWConfig& config);

  // One update of every parameter: grads are multiplied by grad_scale (clipping) before use.
  void step(Tensor& params, const Tensor& grads, float lr, float grad_scale);

  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  Tensor& first_moment() { return m_; }   // flat, like the parameters
  Tensor& second_moment() { return v_; }  // flat, like the parameters
  const Tensor& first_moment() const { return m_; }
  const Tensor& second_moment() const { return v_; }
  const AdamWConfig& config() const { return config_; }

 private:
  const ParameterLayout& layout_;
  AdamWConfig config_;
  Tensor m_, v_;
  int64_t steps_ = 0;
};

}  // namespace tessera
