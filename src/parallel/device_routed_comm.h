// A communicator that sends each call's tensors over the backend for their device: host tensors
// over one Comm (MPI), device tensors over another (NCCL). Both are over the same ranks in the same
// order, and every rank makes the same calls, so each backend sees its own calls in one order on all
// ranks. A call mixing host and device tensors is refused; the barrier goes over the host backend.
#pragma once

#include <memory>

#include "parallel/comm.h"

namespace tessera {

std::shared_ptr<Comm> make_device_routed_comm(std::shared_ptr<Comm> host, std::shared_ptr<Comm> device);

}  // namespace tessera
