// Global gradient norm and clipping factor.
#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "ops/norm.h"

namespace tessera {

float global_grad_norm(const Tensor& grads) { return float(std::sqrt(squared_norm(grads))); }

float clip_scale(float norm, float max_norm) {
  if (max_norm <= 0.0f || !std::isfinite(norm)) return 1.0f;
  return std::min(1.0f, max_norm / (norm + 1e-6f));  // torch's clip_grad_norm_, in fp32 as it computes
}

}  // namespace tessera
