// Dynamic loss scaling: halve on overflow, double after a run of clean steps.
#include "train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tessera {

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config), scale_(config.enabled ? config.initial_scale : 1.0) {
  if (!config_.enabled) return;
  TS_CHECK(std::isfinite(config_.initial_scale) && config_.initial_scale >= 1.0 && config_.initial_scale <= 0x1p100,
           "--loss-scale ", config_.initial_scale, " must be a number in [1, 2^100]");
  int exponent = 0;
  TS_CHECK(std::frexp(config_.initial_scale, &exponent) == 0.5, "--loss-scale ", config_.initial_scale,
           " must be a power of two, so that dividing it out of the gradients is exact: use ",
           std::exp2(std::round(std::log2(config_.initial_scale))));
  TS_CHECK(config_.growth_interval > 0, "--loss-scale-window ", config_.growth_interval, " must be positive");
  TS_CHECK(config_.min_scale > 0 && config_.min_scale <= config_.initial_scale, "the minimum loss scale ",
           config_.min_scale, " must be positive and at most --loss-scale ", config_.initial_scale);
}

void LossScaler::restore(double scale, int64_t clean_steps) {
  if (!config_.enabled || !(scale > 0)) return;
  scale_ = scale;
  clean_steps_ = std::clamp<int64_t>(clean_steps, 0, config_.growth_interval - 1);
}

LossScaler::Verdict LossScaler::update(float scaled_grad_norm) {
  if (!config_.enabled) return Verdict::step;
  if (std::isfinite(scaled_grad_norm)) {
    if (++clean_steps_ == config_.growth_interval) {
      scale_ = std::min(scale_ * 2.0, 0x1p100);
      clean_steps_ = 0;
    }
    return Verdict::step;
  }
  clean_steps_ = 0;
  TS_CHECK(scale_ / 2.0 >= config_.min_scale, "fp16 gradients overflow even at loss scale ", scale_,
           ": the run has diverged; lower --lr, raise --warmup, or train in bf16 (--dtype bf16)");
  scale_ /= 2.0;
  return Verdict::skip;
}

}  // namespace tessera
