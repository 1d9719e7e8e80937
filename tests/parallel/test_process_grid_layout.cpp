// The grid's rank order (tp innermost, pp outermost) and which world ranks form each group, without
// MPI: grid_coord/grid_rank round trips, explicit membership for dp=2 tp=2 pp=2, ep blocks, and the
// properties every layout keeps (a group's size is its degree, a rank's group rank is its coordinate).
#include <gtest/gtest.h>

#include <vector>

#include "parallel/parallel_dims.h"
#include "parallel/process_grid.h"

namespace tessera {

namespace {

ParallelDims dims(int dp, int tp, int pp, int cp, int ep = 1) {
  ParallelDims d;
  d.dp = dp, d.tp = tp, d.pp = pp, d.cp = cp, d.ep = ep;
  return d;
}

// Every layout of `world` ranks (all ways to write it as dp·tp·pp·cp), each with the largest ep
// that divides dp and is at most 4.
std::vector<ParallelDims> all_layouts(int world) {
  std::vector<ParallelDims> layouts;
  for (int tp = 1; tp <= world; ++tp)
    for (int cp = 1; cp <= world; ++cp)
      for (int pp = 1; pp <= world; ++pp) {
        if (world % (tp * cp * pp) != 0) continue;
        ParallelDims d = dims(world / (tp * cp * pp), tp, pp, cp);
        for (int ep = 4; ep >= 1; --ep)
          if (d.dp % ep == 0) {
            d.ep = ep;
            break;
          }
        layouts.push_back(d);
      }
  return layouts;
}

}  // namespace

TEST(ProcessGridLayout, RankOrderPutsTpInnermostAndPpOutermost) {
  const ParallelDims d = dims(2, 2, 2, 1);
  const GridCoord c5 = grid_coord(d, 5);
  EXPECT_EQ(c5.pp, 1);
  EXPECT_EQ(c5.dp, 0);
  EXPECT_EQ(c5.cp, 0);
  EXPECT_EQ(c5.tp, 1);
  const GridCoord c2 = grid_coord(d, 2);
  EXPECT_EQ(c2.pp, 0);
  EXPECT_EQ(c2.dp, 1);
  EXPECT_EQ(c2.tp, 0);
  // dp=2 cp=2 tp=2: rank = (dp_i·2 + cp_i)·2 + tp_i.
  const ParallelDims with_cp = dims(2, 2, 1, 2);
  EXPECT_EQ(grid_rank(with_cp, GridCoord{1, 0, 0, 0}), 1);
  EXPECT_EQ(grid_rank(with_cp, GridCoord{0, 1, 0, 0}), 2);
  EXPECT_EQ(grid_rank(with_cp, GridCoord{0, 0, 1, 0}), 4);
  EXPECT_EQ(grid_rank(dims(2, 3, 4, 5), GridCoord{2, 4, 1, 3}), ((3 * 2 + 1) * 5 + 4) * 3 + 2);
}

TEST(ProcessGridLayout, CoordAndRankRoundTripForEveryLayout) {
  for (int world : {1, 2, 4, 6, 8, 12, 16, 24})
    for (const ParallelDims& d : all_layouts(world)) {
      for (int rank = 0; rank < world; ++rank) {
        const GridCoord c = grid_coord(d, rank);
        EXPECT_LT(c.tp, d.tp);
        EXPECT_LT(c.cp, d.cp);
        EXPECT_LT(c.dp, d.dp);
        EXPECT_LT(c.pp, d.pp);
        EXPECT_EQ(grid_rank(d, c), rank) << d.to_string();
      }
    }
}

TEST(ProcessGridLayout, OutOfGridIsAnError) {
  const ParallelDims d = dims(2, 2, 1, 1);
  EXPECT_THROW(grid_coord(d, 4), Error);
  EXPECT_THROW(grid_coord(d, -1), Error);
  EXPECT_THROW(grid_rank(d, GridCoord{2, 0, 0, 0}), Error);
  EXPECT_THROW(grid_rank(d, GridCoord{0, 0, 0, 1}), Error);
}

TEST(ProcessGridLayout, GroupsOfDp2Tp2Pp2) {
  const ParallelDims d = dims(2, 2, 2, 1, 2);
  using Ranks = std::vector<int>;
  const std::vector<Ranks> tp = {{0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 5}, {4, 5}, {6, 7}, {6, 7}};
  const std::vector<Ranks> dp = {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}};
  const std::vector<Ranks> pp = {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}};
  for (int rank = 0; rank < 8; ++rank) {
    const GroupLayout g = group_layout(d, rank);
    EXPECT_EQ(g.world, (Ranks{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(g.tp, tp[rank]) << "rank " << rank;
    EXPECT_EQ(g.dp, dp[rank]) << "rank " << rank;
    EXPECT_EQ(g.pp, pp[rank]) << "rank " << rank;
    EXPECT_EQ(g.cp, Ranks{rank});
    EXPECT_EQ(g.dp_cp, dp[rank]);  // cp = 1: the gradient replicas are the dp group
    EXPECT_EQ(g.ep, dp[rank]);     // ep = dp = 2: one expert group per (tp, pp), its dp pair
    EXPECT_EQ(g.expert_dp, Ranks{rank});  // every expert group holds other experts: no replicas
  }
}

TEST(ProcessGridLayout, ContextGroupsAndTheirGradientReplicas) {
  const ParallelDims d = dims(2, 2, 1, 2);  // rank = (dp_i·2 + cp_i)·2 + tp_i
  using Ranks = std::vector<int>;
  EXPECT_EQ(group_layout(d, 0).cp, (Ranks{0, 2}));
  EXPECT_EQ(group_layout(d, 0).dp, (Ranks{0, 4}));
  EXPECT_EQ(group_layout(d, 0).dp_cp, (Ranks{0, 2, 4, 6}));
  EXPECT_EQ(group_layout(d, 7).cp, (Ranks{5, 7}));
  EXPECT_EQ(group_layout(d, 7).dp, (Ranks{3, 7}));
  EXPECT_EQ(group_layout(d, 7).dp_cp, (Ranks{1, 3, 5, 7}));
  EXPECT_EQ(group_layout(d, 7).tp, (Ranks{6, 7}));
}

TEST(ProcessGridLayout, ExpertGroupsAreCarvedOutOfDataParallelRanks) {
  using Ranks = std::vector<int>;
  const ParallelDims d = dims(4, 2, 1, 1, 2);  // rank = dp_i·2 + tp_i
  EXPECT_EQ(group_layout(d, 0).ep, (Ranks{0, 2}));  // dp 0 and 1 at tp 0
  EXPECT_EQ(group_layout(d, 5).ep, (Ranks{5, 7}));  // dp 2 and 3 at tp 1
  EXPECT_EQ(group_layout(d, 0).expert_dp, (Ranks{0, 4}));  // the first of each group: the same experts
  EXPECT_EQ(group_layout(d, 7).expert_dp, (Ranks{3, 7}));
  const ParallelDims with_cp = dims(2, 1, 1, 2, 2);  // rank = dp_i·2 + cp_i
  EXPECT_EQ(group_layout(with_cp, 1).ep, (Ranks{1, 3}));
  EXPECT_EQ(group_layout(with_cp, 1).expert_dp, (Ranks{0, 1}));  // cp ranks replicate the experts
  for (int world : {4, 8, 12, 16, 24})
    for (const ParallelDims& layout : all_layouts(world))
      for (int rank = 0; rank < world; ++rank) {
        const GroupLayout g = group_layout(layout, rank);
        const GridCoord me = grid_coord(layout, rank);
        ASSERT_EQ(static_cast<int>(g.ep.size()), layout.ep);
        ASSERT_EQ(static_cast<int>(g.expert_dp.size()), layout.dp * layout.cp / layout.ep);
        for (int member : g.ep) {
          const GridCoord other = grid_coord(layout, member);
          EXPECT_TRUE(other.pp == me.pp && other.tp == me.tp && other.cp == me.cp && other.dp / layout.ep == me.dp / layout.ep);
        }
      }
}

TEST(ProcessGridLayout, EveryGroupHasItsDegreeAndRanksByCoordinate) {
  for (int world : {1, 2, 4, 6, 8, 12, 16, 24})
    for (const ParallelDims& d : all_layouts(world))
      for (int rank = 0; rank < world; ++rank) {
        const GridCoord c = grid_coord(d, rank);
        const GroupLayout g = group_layout(d, rank);
        SCOPED_TRACE(d.to_string() + " rank " + std::to_string(rank));
        ASSERT_EQ(static_cast<int>(g.world.size()), world);
        ASSERT_EQ(static_cast<int>(g.tp.size()), d.tp);
        ASSERT_EQ(static_cast<int>(g.cp.size()), d.cp);
        ASSERT_EQ(static_cast<int>(g.dp.size()), d.dp);
        ASSERT_EQ(static_cast<int>(g.pp.size()), d.pp);
        ASSERT_EQ(static_cast<int>(g.dp_cp.size()), d.dp * d.cp);
        // The group rank is the coordinate along the axis, and the members differ only there.
        EXPECT_EQ(g.tp[c.tp], rank);
        EXPECT_EQ(g.cp[c.cp], rank);
        EXPECT_EQ(g.dp[c.dp], rank);
        EXPECT_EQ(g.pp[c.pp], rank);
        EXPECT_EQ(g.dp_cp[c.dp * d.cp + c.cp], rank);
        for (int i = 0; i < d.tp; ++i) EXPECT_EQ(g.tp[i], grid_rank(d, GridCoord{i, c.cp, c.dp, c.pp}));
        for (int i = 0; i < d.cp; ++i) EXPECT_EQ(g.cp[i], grid_rank(d, GridCoord{c.tp, i, c.dp, c.pp}));
        for (int i = 0; i < d.dp; ++i) EXPECT_EQ(g.dp[i], grid_rank(d, GridCoord{c.tp, c.cp, i, c.pp}));
        for (int i = 0; i < d.pp; ++i) EXPECT_EQ(g.pp[i], grid_rank(d, GridCoord{c.tp, c.cp, c.dp, i}));
      }
}

}  // namespace tessera
