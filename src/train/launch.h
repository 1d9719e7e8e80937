// Turning the launcher's world into a run's process grid: resolve --dp/--tp/--pp/--cp/--ep against
// the world size and the model, check that every rank was started with the same configuration (a
// hash compared over the world), and build the groups.
#pragma once

#include "nn/model_config.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "train/train_config.h"

namespace tessera {

ProcessGrid setup_process_grid(Runtime& runtime, const TrainConfig& config, const ModelConfig& model);

// The layout's rules (after config.validate()'s own) against `world_size` ranks and the model:
// --dp/--tp/--pp/--cp/--ep resolved (--dp 0 fills the world), each dividing what it cuts, the
// pipeline's stages and schedule fitting; throws one line naming the flags and the fix.
ParallelDims resolve_layout(const TrainConfig& config, const ModelConfig& model, int world_size);

}  // namespace tessera
