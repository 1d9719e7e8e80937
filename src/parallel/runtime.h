// The process runtime: world size and rank from the launcher (mpirun / Open MPI, Slurm srun, a PMI
// launcher, or none: a single process of world 1 that never touches MPI), MPI initialised with
// thread support MPI_THREAD_MULTIPLE when launched, the local rank (which GPU to use), and creation
// of MPI groups. One Runtime per process, created in main and passed down. MPI is finalised when it
// goes out of scope normally; when an exception unwinds through it, it is not (other ranks may be
// blocked in a collective), the process exits non-zero and the launcher ends the job.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace tessera {

// This process's rank and the number of processes the launcher's environment says the job has (0 of 1
// for a plain process), read without initialising MPI: for commands that run alone.
struct LauncherPlace {
  int rank = 0, size = 1;
};
LauncherPlace launcher_place();

class Runtime {
 public:
  // Detects the launcher from the environment (OMPI_COMM_WORLD_SIZE, SLURM_STEP_NUM_TASKS, PMI_SIZE)
  // and initialises MPI only then; MPI's world must match the launcher's. argc/argv may be null.
  Runtime(int* argc, char*** argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int world_size() const { return world_size_; }
  int world_rank() const { return world_rank_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }  // ranks on this rank's node
  // True when, on every node of the job, the node has a CUDA GPU for each of its ranks (NCCL's
  // condition: two ranks never share a GPU).
  bool gpu_per_rank() const { return gpu_per_rank_; }
  bool launched() const { return launched_; }  // false: a plain single process
  const std::string& launcher() const { return launcher_; }  // "mpirun", "srun", "pmi" or "none"

  // A communicator over `world_ranks`, in that group-rank order; the calling rank must be a member.
  // Collective over the whole world (MPI_Comm_split of MPI_COMM_WORLD): every rank calls it the
  // same number of times in the same order, each passing the group it belongs to, and the groups of
  // one call partition the world into groups of one size (as a grid axis does). Groups of one rank
  // are make_self_comm and communicate with no one.
  // Device tensors go over NCCL when options.device_transport asks for it (needs gpu_per_rank()),
  // else through host memory over MPI.
  std::shared_ptr<Comm> make_comm(const std::string& name, const std::vector<int>& world_ranks,
                                  const CommOptions& options);

  // Whether every rank passed the same value (collective over the world; true for a single process).
  bool same_on_every_rank(int64_t value) const;

 private:
  int world_size_ = 1, world_rank_ = 0, local_rank_ = 0, local_size_ = 1;
  bool gpu_per_rank_ = false;
  bool launched_ = false;
  std::string launcher_ = "none";
};

}  // namespace tessera
