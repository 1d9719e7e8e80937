// Global gradient-norm clipping. The norm is over every gradient element of the model (later:
// summed over ranks before the square root); the clip becomes a scale folded into the optimizer.
#pragma once

#include "core/tensor.h"

namespace tessera {

// sqrt(sum of squares) of the flat gradient buffer.
float global_grad_norm(const Tensor& grads);

// The factor that brings `norm` down to `max_norm`, as torch.nn.utils.clip_grad_norm_ computes it:
// min(1, max_norm / (norm + 1e-6)), so a norm within 1e-6 of max_norm is scaled too; 1 when
// max_norm <= 0 (off) or the norm is not finite (a step the bad-step guard skips).
float clip_scale(float norm, float max_norm);

}  // namespace tessera
