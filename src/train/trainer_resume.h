// What a run resuming from a checkpoint says before its first step: the flags that changed since the
// checkpoint (each named with its old and new value and what it does) and where the data continues
// when --batch-size changed (at the first unseen sequence). Pure functions of the configs, so each is
// tested alone. (Shape flags that disagree with a checkpoint or an import: train/model_setup.h.)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/train_checkpoint.h"
#include "data/batch_sampler.h"
#include "train/train_config.h"

namespace tessera {

// One line per flag among --steps, --lr, --min-lr, --warmup, --lr-schedule, --decay-fraction,
// --weight-decay and --seed whose value differs from the checkpoint's run (`saved`: its run_config,
// a flag it lacks is not compared), naming the old and new value and what the change does; the
// schedule's lines give the learning rate of step + 1 under both. Empty when nothing changed.
std::string changed_flag_notices(const TrainConfig& config, const nlohmann::json& saved, int64_t step);

// Where a resumed run's data continues.
struct DataResume {
  int64_t consumed = 0;     // sequences read before: the next step reads from here
  SequenceOrigin origin;    // the epoch origin under the new --batch-size (batch_sampler.h)
  std::string notice;       // "--batch-size 4 (was 8): continuing at sequence 16", or empty
};

// The checkpoint's data position (its consumed_sequences, or in checkpoints written before they were
// recorded next_batch times its run's --batch-size) carried over to config's --batch-size.
// `epoch_sequences(B)` gives a single source's epoch length E·B under batch size B (0 for a mixture,
// which draws by the sequence index alone and needs no origin); it is asked only when the batch size
// changed on the same --train-data.
DataResume resume_data_position(const TrainConfig& config, const CheckpointState& state,
                                const std::function<int64_t(int64_t batch_size)>& epoch_sequences);

}  // namespace tessera
