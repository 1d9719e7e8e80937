// The process grid of a run: the world, this rank's coordinates, and one Comm per axis group
// (tp, cp, dp, pp, ep, dp×cp for gradient reduction and expert_dp for the expert weights' gradients), built once from ParallelDims and passed
// explicitly to whatever needs them — never global. Degree-1 groups are real Comm objects of size 1.
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm.h"
#include "parallel/parallel_dims.h"

namespace tessera {

class Runtime;

struct ProcessGrid {
  ParallelDims dims;
  GridCoord coord;
  int world_rank = 0;
  std::shared_ptr<Comm> world, tp, cp, dp, dp_cp, pp, ep, expert_dp;

  bool is_first_stage() const { return coord.pp == 0; }
  bool is_last_stage() const { return coord.pp == dims.pp - 1; }
};

// The world ranks of one rank's groups, each in group-rank order (ascending world rank). An axis
// group holds the ranks that differ from this one only in that axis' coordinate (dp_cp: in dp or
// cp, the replicas a gradient is reduced over). ep is carved out of dp: an expert group holds the
// ranks of ep consecutive dp coordinates (same tp, cp, pp), which share out each MoE layer's experts;
// expert_dp holds the replicas of this rank's experts, the ranks at its place in every expert group
// (over dp and cp), over which the expert weights' gradients are reduced.
struct GroupLayout {
  std::vector<int> world, tp, cp, dp, dp_cp, pp, ep, expert_dp;
};
GroupLayout group_layout(const ParallelDims& dims, int world_rank);

// Splits the runtime's world into the groups of `dims` (already resolved against the world size).
// Collective: every rank creates the groups in the same order — world, tp, cp, dp, dp_cp, pp, ep, expert_dp.
ProcessGrid build_process_grid(Runtime& runtime, const ParallelDims& dims, const CommOptions& options);

}  // namespace tessera
