// Learning-rate schedules, as a pure function of the step (counted from 1):
//   constant: lr after a linear warmup;
//   cosine:   linear warmup to lr, then cosine decay to min_lr at the last step;
//   linear:   linear warmup to lr, then linear decay to min_lr at the last step (Hugging Face's
//             default for fine-tuning, which decays to 0: --min-lr 0);
//   wsd:      warmup-stable-decay: warmup, hold lr, then decay linearly to min_lr over the final
//             decay_fraction of the steps.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

enum class LrScheduleKind { constant, cosine, linear, wsd };

LrScheduleKind parse_lr_schedule(const std::string& name);  // error names --lr-schedule

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::cosine;
  float lr = 3e-4f;
  float min_lr = 0.0f;
  int64_t warmup = 0;
  int64_t total_steps = 1;
  float decay_fraction = 0.2f;  // wsd only

  float at(int64_t step) const;
};

}  // namespace tessera
