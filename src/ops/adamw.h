// AdamW (Loshchilov & Hutter) with decoupled weight decay, per tensor or over many segments at once.
//   g = grad * grad_scale   (grad_scale folds in clipping and loss-scale removal)
//   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
//   param -= lr * ( (m / (1-beta1^step)) / (sqrt(v / (1-beta2^step)) + eps) + weight_decay * param )
// step counts from 1. param, grad, m, v: same number of fp32 elements.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/adamw_element.h"

namespace tessera {

struct AdamWParams {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // already 0 for parameters that are not decayed
  float grad_scale = 1.0f;
  int64_t step = 1;
  uint64_t round_seed = 0;  // keys the stochastic rounding of bf16 moments, with the step
};

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p);

// Multi-tensor AdamW: every segment updated as adamw_update would update it, in one call (on the
// GPU one contiguous launch per run of coalesced segments: faster on an H100 than the chunked single
// launch tried). param: the flat f32 parameters; grad: the flat f32 state the segments' state offsets
// index; m, v: that state's moments, both f32, or both bf16 (half the memory and traffic: each element
// is updated in fp32 and its moments stored back by stochastic rounding keyed on (p.round_seed,
// p.step, the segment's rounding key), which every segment must then have). p.weight_decay applies
// to decayed segments only. mirror (GPU only, bf16 or f16, laid out like param), when given, receives
// every updated parameter rounded, in the same pass: the mixed-precision compute copy.
void adamw_update_segments(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                           const std::vector<AdamWSegment>& segments, const AdamWParams& p, Tensor* mirror = nullptr);

// The segments with each run of neighbours joined into one: a segment that starts where the one before
// it ends, in the parameters, in the state and in the rounding keys (if keyed), with the same decay (a
// GPT-2 block's biases and LayerNorm parameters, for one). The same elements with the same updates,
// in fewer sweeps.
std::vector<AdamWSegment> coalesce_segments(const std::vector<AdamWSegment>& segments);

}  // namespace tessera
