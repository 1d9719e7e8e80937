// Element-type conversion between equally sized tensors on one device: f32 -> bf16 rounds to
// nearest even (NaN stays NaN), bf16 -> f32 is exact. Mixed precision keeps fp32 master weights
// and refreshes their bf16 compute copy with this after every optimizer step.
#pragma once

#include "core/tensor.h"

namespace tessera {

// dst = src converted to dst's dtype; same element count, f32/bf16 either way (or equal dtypes: a copy).
void cast_copy(Tensor& dst, const Tensor& src);

}  // namespace tessera
