// The process grid: which world ranks form each of a rank's groups (a pure function of the layout),
// and the communicators over them, split from the runtime's world in one fixed order on every rank.
#include "parallel/process_grid.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "parallel/runtime.h"

namespace tessera {

namespace {

int coordinate(const GridCoord& coord, Axis axis) {
  switch (axis) {
    case Axis::tp: return coord.tp;
    case Axis::cp: return coord.cp;
    case Axis::dp: return coord.dp;
    case Axis::pp: return coord.pp;
  }
  TS_FAIL("unknown grid axis ", static_cast<int>(axis));
}

// The ranks whose coordinates equal `me`'s on every axis except `free_axes`, ascending.
std::vector<int> axis_group(const ParallelDims& dims, const GridCoord& me, std::initializer_list<Axis> free_axes) {
  std::vector<int> members;
  for (int rank = 0; rank < dims.world_size(); ++rank) {
    const GridCoord other = grid_coord(dims, rank);
    bool same = true;
    for (Axis axis : {Axis::tp, Axis::cp, Axis::dp, Axis::pp}) {
      const bool free = std::find(free_axes.begin(), free_axes.end(), axis) != free_axes.end();
      if (!free && coordinate(other, axis) != coordinate(me, axis)) same = false;
    }
    if (same) members.push_back(rank);
  }
  return members;
}

}  // namespace

GroupLayout group_layout(const ParallelDims& dims, int world_rank) {
  const GridCoord me = grid_coord(dims, world_rank);
  GroupLayout layout;
  layout.world = axis_group(dims, me, {Axis::tp, Axis::cp, Axis::dp, Axis::pp});
  layout.tp = axis_group(dims, me, {Axis::tp});
  layout.cp = axis_group(dims, me, {Axis::cp});
  layout.dp = axis_group(dims, me, {Axis::dp});
  layout.dp_cp = axis_group(dims, me, {Axis::dp, Axis::cp});
  layout.pp = axis_group(dims, me, {Axis::pp});
  // Expert groups are blocks of ep consecutive dp coordinates (Megatron's convention: ep divides
  // dp); the expert weights' replicas are the ranks at the same place in every block, over cp too.
  for (int rank : layout.dp_cp) {
    const GridCoord other = grid_coord(dims, rank);
    if (other.cp == me.cp && other.dp / dims.ep == me.dp / dims.ep) layout.ep.push_back(rank);
    if (other.dp % dims.ep == me.dp % dims.ep) layout.expert_dp.push_back(rank);
  }
  return layout;
}

ProcessGrid build_process_grid(Runtime& runtime, const ParallelDims& dims, const CommOptions& options) {
  TS_CHECK(dims.world_size() == runtime.world_size(), "the layout ", dims.to_string(), " needs ", dims.world_size(),
           " ranks, but the world has ", runtime.world_size(), "; resolve it against the world size first");
  ProcessGrid grid;
  grid.dims = dims;
  grid.world_rank = runtime.world_rank();
  grid.coord = grid_coord(dims, grid.world_rank);
  const GroupLayout layout = group_layout(dims, grid.world_rank);
  // make_comm is collective over the world: this order is the same on every rank.
  grid.world = runtime.make_comm("world", layout.world, options);
  grid.tp = runtime.make_comm("tp", layout.tp, options);
  grid.cp = runtime.make_comm("cp", layout.cp, options);
  grid.dp = runtime.make_comm("dp", layout.dp, options);
  grid.dp_cp = runtime.make_comm("dp_cp", layout.dp_cp, options);
  grid.pp = runtime.make_comm("pp", layout.pp, options);
  grid.ep = runtime.make_comm("ep", layout.ep, options);
  grid.expert_dp = runtime.make_comm("expert_dp", layout.expert_dp, options);
  return grid;
}

}  // namespace tessera
