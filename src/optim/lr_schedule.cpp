// Learning-rate schedules.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tessera {

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "cosine") return LrScheduleKind::cosine;
  if (name == "wsd") return LrScheduleKind::wsd;
  if (name == "linear") return LrScheduleKind::linear;
  TS_FAIL("--lr-schedule: unknown schedule '", name, "'; use constant, cosine, linear or wsd");
}

float LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step <= warmup) return lr * float(step) / float(warmup);
  switch (kind) {
    case LrScheduleKind::constant:
      return lr;
    case LrScheduleKind::cosine: {
      int64_t span = std::max<int64_t>(1, total_steps - warmup);
      double progress = std::clamp(double(step - warmup) / double(span), 0.0, 1.0);
      return float(min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress)));
    }
    case LrScheduleKind::linear: {
      const int64_t span = std::max<int64_t>(1, total_steps - warmup);
      const double progress = std::clamp(double(step - warmup) / double(span), 0.0, 1.0);
      return float(lr + (min_lr - lr) * progress);
    }
    case LrScheduleKind::wsd: {
      int64_t decay_steps = std::max<int64_t>(1, std::llround(double(decay_fraction) * double(total_steps)));
      int64_t decay_start = total_steps - decay_steps;
      if (step <= decay_start) return lr;
      double progress = std::clamp(double(step - decay_start) / double(decay_steps), 0.0, 1.0);
      return float(lr + (min_lr - lr) * progress);
    }
  }
  return lr;
}

}  // namespace tessera
