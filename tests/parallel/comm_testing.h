// Helpers for the multi-rank communicator tests: communicators over the world or a split of it,
// and tensors filled from a formula of the element index.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "parallel/mpi_comm.h"

namespace tessera::testing {

int world_rank();
int world_size();

// A communicator over the whole world (its own duplicate of MPI_COMM_WORLD).
std::shared_ptr<Comm> world_comm(const std::string& name, double timeout_s = 10.0);
// A communicator over the world ranks of one colour; every rank calls it.
std::shared_ptr<Comm> split_comm(const std::string& name, int color);

// A 1-D f32 tensor of n elements with value(i) at element i.
Tensor f32_tensor(int64_t n, const std::function<float(int64_t)>& value);

}  // namespace tessera::testing
