// `tessera plan layout`: the parallel layouts of a number of ranks in which every rank of a run fits
// its device, by the memory plan (train/memory_plan). For each way to split the ranks into tp (at
// most 8: one node's GPUs), pp, cp (by ring or all-to-all), dp and, for MoE models, ep, each ZeRO
// stage (ZeRO-3 resharding its parameters after the forward or keeping them) and recomputation mode,
// it keeps the largest micro-batch that fits (with pp > 1, one that leaves at least pp
// micro-batches a step, so that no stage waits for lack of work), skipping ZeRO without a
// data-parallel group and recomputation that fits no larger micro-batch, and ranks the layouts: least recomputation first,
// then the smallest model-parallel degree (tp·pp·cp·ep: the least communication on the critical
// path), the lowest ZeRO stage (ZeRO-3 keeping its parameters before resharding them), the largest
// micro-batch, the ring before all-to-all. Memory decides what is listed; the order is
// a rule of thumb (Megatron's), not a measured speed.
#pragma once

#include <cstdint>
#include <vector>

#include "train/memory_plan.h"

namespace tessera {

struct LayoutCandidate {
  TrainConfig config;  // the run's flags with the layout's dp, tp, pp, cp, ep, zero, recompute, micro-batch
  MemoryPlan plan;
};

// `config`: the run's model, batch, sequence length, schedule (with its --virtual-stages, kept for
// every layout with pp > 1) and precision; its layout flags are what the search chooses. Every
// candidate fits `device_bytes` of a GPU; best first. Throws naming the flag when the flags every
// layout shares are refused (train's own checks: --batch-size, --seq-len within the context, ...).
std::vector<LayoutCandidate> search_layouts(const TrainConfig& config, const ModelConfig& model, DType compute,
                                            int world, int64_t device_bytes, int64_t reserve_bytes = kUnsetReserve);

}  // namespace tessera
