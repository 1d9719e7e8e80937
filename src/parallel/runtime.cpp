// Runtime: finds the launcher in the environment, initialises MPI (MPI_THREAD_MULTIPLE) only when
// there is one, holds MPI's world to what the launcher said, and splits MPI_COMM_WORLD into groups.
// MPI errors come back as codes (MPI_ERRORS_RETURN, inherited by every split) and MPI_CHECK turns
// them into tessera::Error.
#include "parallel/runtime.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <exception>

#include "core/cuda/device.h"
#include "core/error.h"
#include "parallel/device_routed_comm.h"
#include "parallel/host_staged_comm.h"
#include "parallel/mpi_check.h"
#include "parallel/mpi_comm.h"
#include "parallel/nccl_comm.h"

namespace tessera {

namespace {

// The variables a launcher sets in every process it starts. Slurm's SLURM_NTASKS and SLURM_PROCID
// are also set in the shell of an sbatch script, where nothing was launched yet; only srun adds
// SLURM_STEP_NUM_TASKS. PMI_SIZE / PMI_RANK come from PMI launchers (MPICH's Hydra, srun --mpi=pmi2).
struct LauncherVars {
  const char* launcher;
  const char* size;
  const char* rank;
  const char* local_rank;
  const char* mismatch_fix;  // what to do when MPI's world disagrees with the launcher's
};

constexpr LauncherVars kLaunchers[] = {
    {"mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
     "start Tessera with the mpirun of the Open MPI it was built with"},
    {"srun", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID",
     "this MPI did not reach Slurm's PMI: run srun --mpi=pmix (srun --mpi=list shows what the cluster offers) "
     "or start the job with mpirun inside the allocation"},
    {"pmi", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID",
     "this MPI (Open MPI) does not speak the launcher's PMI; start the job with mpirun or srun --mpi=pmix"},
};

// An environment variable holding a count or an index; -1 when unset.
int env_index(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return -1;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  TS_CHECK(*text != '\0' && *end == '\0' && value >= 0 && value <= INT_MAX, "environment variable ", name, "='",
           text, "' is not a process count or index; unset it or start the job with mpirun or srun");
  return static_cast<int>(value);
}

// This rank's index among the ranks on its node, and their number.
struct NodePlace {
  int rank = 0, size = 1;
};

NodePlace node_place(int world_rank) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  NodePlace place;
  MPI_CHECK(MPI_Comm_rank(node, &place.rank));
  MPI_CHECK(MPI_Comm_size(node, &place.size));
  MPI_CHECK(MPI_Comm_free(&node));
  return place;
}

}  // namespace

LauncherPlace launcher_place() {
  for (const LauncherVars& vars : kLaunchers)
    if (const int size = env_index(vars.size); size >= 0) return {std::max(env_index(vars.rank), 0), size};
  return {};
}

Runtime::Runtime(int* argc, char*** argv) {
  const auto found = std::find_if(std::begin(kLaunchers), std::end(kLaunchers),
                                  [](const LauncherVars& vars) { return env_index(vars.size) >= 0; });
  if (found == std::end(kLaunchers)) {  // a plain process: world 1, MPI untouched
    gpu_per_rank_ = cuda_device_count() > 0;
    return;
  }
  const LauncherVars& vars = *found;
  const int env_size = env_index(vars.size), env_rank = env_index(vars.rank);
  TS_CHECK(env_rank >= 0, vars.size, " is set but ", vars.rank, " is not; start the job with mpirun or srun");

  int initialised = 0;
  MPI_Initialized(&initialised);
  TS_CHECK(!initialised, "MPI is already initialised: create one tessera::Runtime per process");
  int provided = MPI_THREAD_SINGLE;
  TS_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS,
           "MPI_Init_thread failed under ", vars.launcher, "; check the launcher's messages above");
  launched_ = true;
  launcher_ = vars.launcher;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();  // every rank gets the same answer, so all finalise together
    TS_FAIL("this MPI provides thread level ", provided, " but Tessera needs MPI_THREAD_MULTIPLE (",
            MPI_THREAD_MULTIPLE, ") for its communicators' progress threads; use an MPI built with thread support");
  }
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  if (world_size_ != env_size || world_rank_ != env_rank) {
    // Typically every process is an MPI singleton; finalising one is local and cannot hang.
    if (world_size_ == 1) MPI_Finalize();
    TS_FAIL(vars.launcher, " started this process as rank ", env_rank, " of ", env_size, " (", vars.rank, ", ",
            vars.size, ") but MPI_COMM_WORLD makes it rank ", world_rank_, " of ", world_size_, "; ",
            vars.mismatch_fix);
  }
  const NodePlace node = node_place(world_rank_);
  const int env_local = env_index(vars.local_rank);
  local_rank_ = env_local >= 0 ? env_local : node.rank;
  local_size_ = node.size;
  int enough_gpus = cuda_device_count() >= local_size_ ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &enough_gpus, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  gpu_per_rank_ = enough_gpus == 1;
}

Runtime::~Runtime() {
  // An error unwinding through here may have left other ranks waiting inside a collective, and
  // MPI_Finalize would wait for them in turn; exiting without it makes the launcher end the job.
  if (launched_ && std::uncaught_exceptions() == 0) MPI_Finalize();
}

std::shared_ptr<Comm> Runtime::make_comm(const std::string& name, const std::vector<int>& world_ranks,
                                         const CommOptions& options) {
  for (int r : world_ranks)
    TS_CHECK(r >= 0 && r < world_size_, "group ", name, ": world rank ", r, " is outside the world of ", world_size_,
             " ranks");
  const auto me = std::find(world_ranks.begin(), world_ranks.end(), world_rank_);
  TS_CHECK(me != world_ranks.end(), "group ", name, ": world rank ", world_rank_,
           " asked for a group it is not a member of");
  if (world_ranks.size() == 1) return make_self_comm(name, world_rank_, options);

  // MPI_Comm_split is collective over MPI_COMM_WORLD: all ranks are inside this call together, each
  // naming its own group. The smallest member is the same on every member, so it labels the group.
  const int color = *std::min_element(world_ranks.begin(), world_ranks.end());
  const int key = static_cast<int>(me - world_ranks.begin());
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm));

  // The ranks that joined must be the ones this rank listed; otherwise the callers disagree.
  int joined_size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &joined_size));
  std::vector<int> joined(joined_size);
  MPI_CHECK(MPI_Allgather(&world_rank_, 1, MPI_INT, joined.data(), 1, MPI_INT, comm));
  if (joined != world_ranks) {
    MPI_Comm_free(&comm);
    TS_FAIL("group ", name, ": world rank ", world_rank_, " listed ", world_ranks.size(), " members, but ",
            joined_size, " ranks joined it, not in the listed order; every rank must create the same groups in "
            "the same order");
  }
  if (options.device_transport == DeviceTransport::nccl) {
    TS_CHECK(gpu_per_rank_, "group ", name, ": NCCL needs a GPU for each rank, and some node runs more ranks than it ",
             "has GPUs; start at most one rank per GPU, or send device tensors through host memory");
    // NCCL's id travels over the new communicator before the MPI backend takes it over.
    std::shared_ptr<Comm> nccl = make_nccl_comm(comm, name, world_ranks, cuda_current_device(), options);
    return make_device_routed_comm(make_mpi_comm(comm, name, world_ranks, options), std::move(nccl));
  }
  // Device tensors are staged through host memory: this MPI is not CUDA-aware.
  return make_host_staged_comm(make_mpi_comm(comm, name, world_ranks, options));
}

bool Runtime::same_on_every_rank(int64_t value) const {
  if (!launched_) return true;
  int64_t bounds[2] = {value, -value};  // max of both: the largest value and minus the smallest
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD));
  return bounds[0] == -bounds[1];
}

}  // namespace tessera
