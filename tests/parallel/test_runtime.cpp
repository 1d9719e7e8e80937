// Runtime in one process: no launcher means world 1 with MPI never initialised, groups of one rank,
// a grid of size-1 groups; a launcher environment that is malformed fails before MPI starts.
// (The launched paths run under mpirun in tests/parallel/mpi_grid_test.cpp.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "support/test_support.h"

namespace tessera {

using testing::contains;
using testing::error_of;

namespace {

// Sets (or with nullopt unsets) an environment variable for one scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// No launcher variables, as in a plain shell (or an sbatch script's own shell).
struct NoLauncher {
  ScopedEnv ompi{"OMPI_COMM_WORLD_SIZE", std::nullopt}, slurm{"SLURM_STEP_NUM_TASKS", std::nullopt},
      pmi{"PMI_SIZE", std::nullopt};
};

bool mpi_initialised() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

}  // namespace

TEST(Runtime, WithoutALauncherIsWorldOneAndLeavesMpiAlone) {
  NoLauncher clean;
  Runtime runtime(nullptr, nullptr);
  EXPECT_EQ(runtime.world_size(), 1);
  EXPECT_EQ(runtime.world_rank(), 0);
  EXPECT_EQ(runtime.local_rank(), 0);
  EXPECT_FALSE(runtime.launched());
  EXPECT_EQ(runtime.launcher(), "none");
  EXPECT_EQ(runtime.local_size(), 1);
  EXPECT_TRUE(runtime.same_on_every_rank(42));
  EXPECT_FALSE(mpi_initialised());

  const std::shared_ptr<Comm> comm = runtime.make_comm("dp", {0}, CommOptions{});
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->name(), "dp");
  EXPECT_EQ(comm->world_ranks(), std::vector<int>{0});
  EXPECT_TRUE(contains(error_of([&] { runtime.make_comm("tp", {1}, CommOptions{}); }), "outside the world of 1"));
  EXPECT_FALSE(mpi_initialised());
}

TEST(Runtime, AnSbatchShellIsNotALaunch) {
  // sbatch sets these for the batch script itself; only srun adds SLURM_STEP_NUM_TASKS.
  NoLauncher clean;
  ScopedEnv ntasks("SLURM_NTASKS", "16"), procid("SLURM_PROCID", "0");
  Runtime runtime(nullptr, nullptr);
  EXPECT_FALSE(runtime.launched());
  EXPECT_EQ(runtime.world_size(), 1);
}

TEST(Runtime, MalformedLauncherVariablesFailBeforeMpiStarts) {
  NoLauncher clean;
  {
    ScopedEnv size("OMPI_COMM_WORLD_SIZE", "four");
    EXPECT_TRUE(contains(error_of([] { Runtime runtime(nullptr, nullptr); }), "OMPI_COMM_WORLD_SIZE='four'"));
  }
  {
    ScopedEnv size("SLURM_STEP_NUM_TASKS", "4"), rank("SLURM_PROCID", std::nullopt);
    EXPECT_TRUE(contains(error_of([] { Runtime runtime(nullptr, nullptr); }),
                         "SLURM_STEP_NUM_TASKS is set but SLURM_PROCID is not"));
  }
  EXPECT_FALSE(mpi_initialised());
}

TEST(Runtime, SingleProcessGridHasGroupsOfOne) {
  NoLauncher clean;
  Runtime runtime(nullptr, nullptr);
  const ProcessGrid grid = build_process_grid(runtime, ParallelDims::resolve(ParallelDims{0}, 1), CommOptions{});
  EXPECT_TRUE(grid.is_first_stage());
  EXPECT_TRUE(grid.is_last_stage());
  for (const auto& comm : {grid.world, grid.tp, grid.cp, grid.dp, grid.dp_cp, grid.pp, grid.ep, grid.expert_dp}) {
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(comm->size(), 1);
    EXPECT_EQ(comm->world_ranks(), std::vector<int>{0});
  }
  EXPECT_EQ(grid.dp->name(), "dp");
  ParallelDims two;
  two.dp = 2;
  EXPECT_TRUE(contains(error_of([&] { build_process_grid(runtime, two, CommOptions{}); }),
                       "needs 2 ranks, but the world has 1"));
}

}  // namespace tessera
