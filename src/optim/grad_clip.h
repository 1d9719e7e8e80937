// Global gradient-norm clipping. The norm is over every gradient element of the model (later:
// summed over ranks before the square root); the clip becomes a scale folded into the optimizer.
#pragma once

#include "core/tensor.h"

namespace tessera {

// sqrt(sum of squares) of the flat gradient buffer.
float global_grad_norm(const Tensor& grads);

// The factor that brings `norm` down to `max_norm` (1 when max_norm <= 0 or norm <= max_norm).
float clip_scale(float norm, float max_norm);

}  // namespace tessera
