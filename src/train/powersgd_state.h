// PowerSGD's state across a checkpoint (--powersgd-rank): what a rank writes of it at a save and how
// a resumed run takes it back. The compression depends on the ranks' gradients and errors only
// through their sums, so the checkpoint keeps each group's error sum, and a resumed run gives each
// rank sum / group size: any data-parallel degree then continues the same trajectory. Qᵀ and a
// pipeline's tied embedding copy belong to one tensor-parallel slice: they come back when --tp and
// --powersgd-rank are the checkpoint's, and otherwise start afresh, with a notice.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/train_checkpoint.h"
#include "nn/tensor_parallel.h"
#include "optim/adamw_optimizer.h"
#include "parallel/dp/grad_reducer.h"

namespace tessera {

// Where a rank's PowerSGD matrices sit among the checkpoint's tensors.
struct PowerSgdPlace {
  const ParameterLayout* layout = nullptr;  // the rank's parameters
  TpPlace tp;
  OffsetRange tied_copy;  // a pipeline's last-stage copy of the embedding, if this rank holds one
};

// Collective over every bucket's group (at a save, on every rank): this rank's part, its errors
// laid out as the moments of `segments` (a buffer of `state_size`).
PowerSgdPart powersgd_part(GradReducer& reducer, const PowerSgdPlace& place, const std::vector<OptimSegment>& segments,
                           int64_t state_size);

// Restores the reducer's PowerSGD state from `checkpoint`; returns a notice for what starts afresh
// (empty when everything came back).
std::string restore_powersgd(GradReducer& reducer, const PowerSgdPlace& place, const std::filesystem::path& checkpoint);

}  // namespace tessera
