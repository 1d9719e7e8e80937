// The process grid of a run: the world, this rank's coordinates, and one Comm per axis group
// (tp, cp, dp, pp, ep, and dp×cp for gradient reduction), built once from ParallelDims and passed
// explicitly to whatever needs them — never global. Degree-1 groups are real Comm objects of size 1.
#pragma once

#include <memory>

#include "parallel/comm.h"
#include "parallel/parallel_dims.h"

namespace tessera {

class Runtime;

struct ProcessGrid {
  ParallelDims dims;
  GridCoord coord;
  int world_rank = 0;
  std::shared_ptr<Comm> world, tp, cp, dp, pp, ep;

  bool is_first_stage() const { return coord.pp == 0; }
  bool is_last_stage() const { return coord.pp == dims.pp - 1; }
};

// Splits the runtime's world into the groups of `dims` (already resolved against the world size).
ProcessGrid build_process_grid(Runtime& runtime, const ParallelDims& dims, const CommOptions& options);

}  // namespace tessera
