// For multi-rank tests whose subject includes the Runtime itself (launcher detection, MPI set-up):
// their shared main makes one Runtime per process before the tests run.
#pragma once

#include "parallel/runtime.h"

namespace tessera::testing {

// The process's Runtime, valid while the tests run.
Runtime& test_runtime();

}  // namespace tessera::testing
