// AdamW (Loshchilov & Hutter) with decoupled weight decay, one parameter tensor per call.
//   g = grad * grad_scale   (grad_scale folds in clipping and loss-scale removal)
//   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
//   param -= lr * ( (m / (1-beta1^step)) / (sqrt(v / (1-beta2^step)) + eps) + weight_decay * param )
// step counts from 1. param, grad, m, v: same number of fp32 elements.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera {

struct AdamWParams {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // already 0 for parameters that are not decayed
  float grad_scale = 1.0f;
  int64_t step = 1;
};

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p);

}  // namespace tessera
