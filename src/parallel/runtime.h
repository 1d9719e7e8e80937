// The process runtime: world size and rank from the launcher (mpirun / Open MPI, Slurm srun, or
// none: a single process of world 1 that never touches MPI), MPI initialised with thread support
// MPI_THREAD_MULTIPLE when launched, the local rank (which GPU to use), and creation of MPI groups.
// One Runtime per process, created in main and passed down.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace tessera {

class Runtime {
 public:
  // Detects the launcher from the environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE / SLURM_NTASKS) and
  // initialises MPI only then.
  Runtime(int* argc, char*** argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int world_size() const { return world_size_; }
  int world_rank() const { return world_rank_; }
  int local_rank() const { return local_rank_; }
  bool launched() const { return launched_; }  // false: a plain single process
  const std::string& launcher() const { return launcher_; }  // "mpirun", "srun" or "none"

  // A communicator over `world_ranks` (every rank of the world calls this collectively with the
  // same groups, in the same order); the calling rank must be a member.
  std::shared_ptr<Comm> make_comm(const std::string& name, const std::vector<int>& world_ranks,
                                  const CommOptions& options);

 private:
  int world_size_ = 1, world_rank_ = 0, local_rank_ = 0;
  bool launched_ = false;
  std::string launcher_ = "none";
};

}  // namespace tessera
