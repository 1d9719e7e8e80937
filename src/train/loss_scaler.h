// Dynamic loss scaling for fp16 training (Micikevicius et al., "Mixed Precision Training"): the loss
// gradient is multiplied by a scale S before backward, so small fp16 activation gradients do not
// flush to zero; the fp32 parameter gradients are divided by S again inside the optimizer step.
// After every backward the scaler sees the global norm of the scaled gradients: infinite or NaN
// means an fp16 overflow, and the step is skipped while S halves; after `growth_interval` clean
// steps in a row S doubles. S stays a power of two, so scaling and unscaling are exact in fp32.
// Disabled (bf16, fp32), the scale is 1 and every step goes ahead.
#pragma once

#include <cstdint>

namespace tessera {

struct LossScalerConfig {
  bool enabled = false;
  double initial_scale = 65536.0;  // 2^16, as torch.amp.GradScaler
  int64_t growth_interval = 1000;  // clean steps before the scale doubles
  double min_scale = 1.0;          // an overflow below it ends the run: the model diverged
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  bool enabled() const { return config_.enabled; }
  // The factor the next backward's loss gradient carries (1 when disabled).
  float scale() const { return float(scale_); }
  // Continues from a checkpoint's scale and its run of clean steps toward the next doubling, so a
  // resumed run grows the scale when an uninterrupted one would (ignored when disabled or the scale
  // is not positive).
  void restore(double scale, int64_t clean_steps = 0);
  // The clean steps since the scale last changed (torch.amp.GradScaler's growth tracker): what a
  // checkpoint needs besides scale() to continue exactly.
  int64_t clean_steps() const { return clean_steps_; }

  enum class Verdict { step, skip };
  // The global norm of the gradients the last backward produced with scale(): step when finite
  // (and count it toward growth), skip after halving the scale when not. Throws when an overflow
  // would take the scale below min_scale. Disabled, always step.
  Verdict update(float scaled_grad_norm);

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t clean_steps_ = 0;
};

}  // namespace tessera
