// Turning the launcher's world into a run's process grid: resolve --dp/--tp/--pp/--cp/--ep against
// the world size and the model, check that every rank was started with the same configuration (a
// hash compared over the world), and build the groups.
#pragma once

#include "nn/model_config.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "train/run_refused.h"
#include "train/train_config.h"

namespace tessera {

// Throws RunRefused when config's flags (config.validate()), the model they describe or read
// (model_config_for_run: a preset, --init-from, the checkpoint --resume continues) and the layout
// against `world_size` ranks do not go together; returns the model's configuration. Reads only
// configuration files, and communicates with no other rank.
ModelConfig check_run_config(const TrainConfig& config, int world_size);

// Collective over the world. Throws RunRefused for a configuration refused (check_run_config's, then
// ranks started with different configurations); other errors (a collective that timed out) as they come.
ProcessGrid setup_process_grid(Runtime& runtime, const TrainConfig& config, const ModelConfig& model);

// The layout's rules (after config.validate()'s own) against `world_size` ranks and the model:
// --dp/--tp/--pp/--cp/--ep resolved (--dp 0 fills the world), each dividing what it cuts, the
// pipeline's stages and schedule fitting; throws one line naming the flags and the fix.
ParallelDims resolve_layout(const TrainConfig& config, const ModelConfig& model, int world_size);

}  // namespace tessera
