// A run's pipeline layout (issue 8): the blocks of each of the P·V chunks (balanced by cost, or
// --pipeline-boundaries) and the schedule's action tables for the step's micro-batches. Made on every
// rank alike at start-up, so a layout that does not fit fails there with one line naming the flags.
#pragma once

#include "nn/model_config.h"
#include "nn/stage_partition.h"
#include "parallel/pp/pipeline_schedule.h"
#include "train/train_config.h"

namespace tessera {

struct PipelinePlan {
  StageBoundaries boundaries;  // P·V + 1 entries
  PipelineSchedule schedule;
};

// For `config`'s --pp, --virtual-stages, --pipeline-schedule and --pipeline-boundaries on `model`,
// with `dp` data-parallel ranks: each runs batch_size / (dp · micro-batch size) micro-batches a step,
// P V M at most kMaxScheduleSlots (more throws naming the flags).
PipelinePlan plan_pipeline(const TrainConfig& config, const ModelConfig& model, int dp);

}  // namespace tessera
