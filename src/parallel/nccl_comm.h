// Comm over NCCL for CUDA tensors, one rank per GPU: NCCL's unique id goes from group rank 0 to the
// others over MPI, then every collective is queued on the group's communication stream after the
// work already queued on the compute stream, and Work completes through a CUDA event recorded
// behind it. Timeouts abort the NCCL communicator after naming the missing ranks, as for MPI.
// Builds with CUDA and NCCL only; otherwise nccl_unavailable.cpp answers with a clear error.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace tessera {

// True when this build has the NCCL backend (CUDA and NCCL were found when it was configured).
bool nccl_built();
// True when this process sees at least one CUDA device (always false in a build without CUDA).
bool cuda_device_available();
// Free memory on CUDA device `device`, in bytes.
size_t cuda_free_memory(int device);

// A NCCL communicator over the ranks of `bootstrap` (not owned: used to broadcast NCCL's id and,
// for groups of two or more, duplicated for the arrival channel), on CUDA device `device`.
// `bootstrap` may be MPI_COMM_NULL for a group of one, which then needs no MPI at all.
std::shared_ptr<Comm> make_nccl_comm(MPI_Comm bootstrap, std::string name, std::vector<int> world_ranks, int device,
                                     const CommOptions& options);

}  // namespace tessera
