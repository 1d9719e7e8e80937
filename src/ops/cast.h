// Element-type conversion between equally sized tensors on one device: f32 -> bf16 or f16 rounds to
// nearest even (NaN stays NaN; beyond f16's range becomes infinite), bf16 or f16 -> f32 is exact.
// Mixed precision keeps fp32 master weights and refreshes their 16-bit compute copy with this after
// every optimizer step.
#pragma once

#include "core/tensor.h"

namespace tessera {

// dst = src converted to dst's dtype; same element count, f32 <-> bf16 or f16 (or equal dtypes: a copy).
void cast_copy(Tensor& dst, const Tensor& src);

}  // namespace tessera
