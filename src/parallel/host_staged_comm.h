// A communicator for device (CUDA) tensors over a backend that takes host tensors only, as MPI does
// here (no CUDA-aware build): each collective copies its device inputs into host buffers, runs on
// the backend, and copies the device outputs back when its Work is waited on (so outputs are
// written by wait(), not by completion alone). Host tensors pass straight through. This is how
// several ranks share one GPU in tests (the layout-equivalence harness); NCCL is the production path
// between GPUs.
#pragma once

#include <memory>

#include "parallel/comm.h"

namespace tessera {

std::shared_ptr<Comm> make_host_staged_comm(std::shared_ptr<Comm> host_comm);

}  // namespace tessera
