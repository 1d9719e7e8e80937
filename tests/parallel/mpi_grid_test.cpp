// Under mpirun (ctest runs -np 4 and -np 8; any count works): the Runtime sees the launcher, and for
// every layout of the world the grid's groups have the expected size and members, and an all-reduce
// of the world rank over each group sums exactly its members — the communicators are those groups.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <numeric>
#include <vector>

#include "core/cuda/device.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "runtime_test_main.h"

namespace tessera {

namespace {


// A failed check on one rank must not leave the others waiting for the test's whole timeout.
CommOptions options() {
  CommOptions o;
  o.timeout_s = 30.0;
  return o;
}

ParallelDims dims(int dp, int tp, int pp, int cp, int ep) {
  ParallelDims d;
  d.dp = dp, d.tp = tp, d.pp = pp, d.cp = cp, d.ep = ep;
  return d;
}

// Size, members, group rank and an all-reduce of the world rank, checked for one group.
void check_group(Comm& comm, const std::vector<int>& expected, int world_rank) {
  SCOPED_TRACE("group " + comm.name());
  ASSERT_EQ(comm.size(), static_cast<int>(expected.size()));
  EXPECT_EQ(comm.world_ranks(), expected);
  EXPECT_EQ(expected[comm.rank()], world_rank);
  Tensor value = Tensor::zeros({1});
  value.f32()[0] = static_cast<float>(world_rank);
  comm.all_reduce(value);
  EXPECT_EQ(value.f32()[0], static_cast<float>(std::accumulate(expected.begin(), expected.end(), 0)));
}

}  // namespace

TEST(MpiGrid, RuntimeSeesTheLauncher) {
  EXPECT_TRUE(testing::test_runtime().launched());
  EXPECT_EQ(testing::test_runtime().launcher(), "mpirun");
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_EQ(testing::test_runtime().world_size(), size);
  EXPECT_EQ(testing::test_runtime().world_rank(), rank);
  EXPECT_GE(testing::test_runtime().local_rank(), 0);
  EXPECT_LT(testing::test_runtime().local_rank(), size);
  // One node here: every rank is on it, and each has a GPU of its own only if the node has enough.
  EXPECT_EQ(testing::test_runtime().local_size(), size);
  EXPECT_EQ(testing::test_runtime().gpu_per_rank(), cuda_device_count() >= size);
}

TEST(MpiGrid, SameOnEveryRankComparesOverTheWorld) {
  const Runtime& runtime = testing::test_runtime();
  EXPECT_TRUE(runtime.same_on_every_rank(7));
  EXPECT_TRUE(runtime.same_on_every_rank(-3));
  EXPECT_FALSE(runtime.same_on_every_rank(runtime.world_rank()));
  EXPECT_FALSE(runtime.same_on_every_rank(runtime.world_rank() == 0 ? -1 : 1));
}

TEST(MpiGrid, EveryLayoutBuildsItsGroups) {
  const int world = testing::test_runtime().world_size(), me = testing::test_runtime().world_rank();
  // Every way to write the world as dp·tp·pp·cp, half of them asking for dp = 0 (fill the world),
  // with ep cycling through the divisors of dp.
  std::vector<ParallelDims> layouts;
  for (int tp = 1; tp <= world; ++tp)
    for (int cp = 1; cp <= world; ++cp)
      for (int pp = 1; pp <= world; ++pp) {
        if (world % (tp * cp * pp) != 0) continue;
        const int dp = world / (tp * cp * pp);
        int ep = 1 + static_cast<int>(layouts.size()) % dp;
        while (dp % ep != 0) --ep;
        layouts.push_back(dims(layouts.size() % 2 == 0 ? dp : 0, tp, pp, cp, ep));
      }
  for (const ParallelDims& requested : layouts) {
    const ParallelDims d = ParallelDims::resolve(requested, world);
    SCOPED_TRACE(d.to_string());
    const ProcessGrid grid = build_process_grid(testing::test_runtime(), d, options());
    const GroupLayout expected = group_layout(d, me);
    EXPECT_EQ(grid.world_rank, me);
    EXPECT_EQ(grid_rank(d, grid.coord), me);
    EXPECT_EQ(grid.is_first_stage(), grid.coord.pp == 0);
    EXPECT_EQ(grid.is_last_stage(), grid.coord.pp == d.pp - 1);
    check_group(*grid.world, expected.world, me);
    check_group(*grid.tp, expected.tp, me);
    check_group(*grid.cp, expected.cp, me);
    check_group(*grid.dp, expected.dp, me);
    check_group(*grid.dp_cp, expected.dp_cp, me);
    check_group(*grid.pp, expected.pp, me);
    check_group(*grid.ep, expected.ep, me);
    check_group(*grid.expert_dp, expected.expert_dp, me);
    EXPECT_EQ(grid.dp->rank(), grid.coord.dp);
    EXPECT_EQ(grid.tp->rank(), grid.coord.tp);
    EXPECT_EQ(grid.pp->rank(), grid.coord.pp);
  }
}

TEST(MpiGrid, Dp2Tp2Pp2GroupsByWorldRank) {
  if (testing::test_runtime().world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  const ProcessGrid grid = build_process_grid(testing::test_runtime(), dims(2, 2, 2, 1, 1), options());
  const int me = testing::test_runtime().world_rank();
  // rank = (pp_i·2 + dp_i)·2 + tp_i: tp pairs are neighbours, dp pairs 2 apart, pp pairs 4 apart.
  EXPECT_EQ(grid.tp->world_ranks(), (std::vector<int>{me & ~1, (me & ~1) + 1}));
  EXPECT_EQ(grid.dp->world_ranks(), (std::vector<int>{me & ~2, (me & ~2) + 2}));
  EXPECT_EQ(grid.pp->world_ranks(), (std::vector<int>{me & ~4, (me & ~4) + 4}));
}

}  // namespace tessera
