// Comm over MPI for CPU tensors. Non-blocking collectives are MPI_I* requests driven by one
// progress thread per communicator (Open MPI here has no asynchronous progress of its own), so a
// bucket's reduction advances while the main thread computes backward. Also the size-1 Comm used
// when a process runs without a launcher: every collective completes at once.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace tessera {

// Takes ownership of `comm` (freed with the Comm; a one-rank comm is freed at once and a self Comm
// returned). world_ranks: the members' world ranks, in communicator rank order. Needs MPI initialised
// with MPI_THREAD_MULTIPLE; destroy the Comm, and drop its Work, before MPI_Finalize.
std::shared_ptr<Comm> make_mpi_comm(MPI_Comm comm, std::string name, std::vector<int> world_ranks,
                                    const CommOptions& options);

// A group of one rank that never calls MPI (world 1 without a launcher, or a degree-1 axis).
std::shared_ptr<Comm> make_self_comm(std::string name, int world_rank, const CommOptions& options);

}  // namespace tessera
