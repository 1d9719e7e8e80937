// A run trained straight through against the same run stopped part-way and resumed: what a
// checkpoint must hold for the second to continue the first exactly.
#pragma once

#include <filesystem>
#include <vector>

#include "checkpoint/run_folder.h"
#include "train/trainer.h"

namespace tessera::testing {

inline std::vector<float> final_params(Trainer& trainer) {
  Tensor& p = trainer.model().params();
  return std::vector<float>(p.f32(), p.f32() + p.numel());
}

struct StraightAndResumed {
  TrainConfig straight, resumed;          // their configurations (out_dir: <dir>/straight, <dir>/resumed)
  std::vector<float> straight_params, resumed_params;
  std::filesystem::path checkpoint;       // where the resumed run stopped
};

// `run` for its --steps in one go, and stopped after `stop` steps then resumed to the same end. A
// constant learning-rate schedule, so that the stopped part sees the rates of the whole run.
inline StraightAndResumed train_straight_and_resumed(TrainConfig run, const std::filesystem::path& dir, int64_t stop) {
  StraightAndResumed r;
  run.lr_schedule = "constant";
  r.straight = run;
  r.straight.out_dir = (dir / "straight").string();
  Trainer straight(r.straight);
  straight.run();
  r.straight_params = final_params(straight);

  TrainConfig part = run;
  part.out_dir = (dir / "resumed").string();
  part.steps = stop;
  Trainer(part).run();
  const std::optional<std::filesystem::path> checkpoint = find_checkpoint(part.out_dir);
  if (checkpoint) r.checkpoint = *checkpoint;
  r.resumed = part;
  r.resumed.steps = run.steps;
  r.resumed.resume = true;
  Trainer resumed(r.resumed);
  resumed.run();
  r.resumed_params = final_params(resumed);
  return r;
}

}  // namespace tessera::testing
