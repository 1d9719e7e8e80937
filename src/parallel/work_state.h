// What a backend puts behind a Work handle: a collective in flight that can be waited on (with the
// communicator's timeout) and polled. MPI and NCCL each derive their own; a default Work (no state)
// is a collective that completed when it was issued, as on a group of one rank.
#pragma once

#include "parallel/comm.h"

namespace tessera {

struct Work::State {
  virtual ~State() = default;
  // Returns once complete; throws tessera::Error on timeout or failure.
  virtual void wait() = 0;
  virtual bool done() const = 0;
};

}  // namespace tessera
