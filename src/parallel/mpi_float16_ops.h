// MPI reductions of 16-bit floats (bf16, f16), which MPI has no types for: user-defined operations
// over 16-bit words that widen each pair to f32, combine, and round back (to nearest even), as
// NCCL's bf16 and f16 reductions do. Compressed gradient reductions (bf16) run on them over MPI.
#pragma once

#include <mpi.h>

#include "core/dtype.h"
#include "parallel/comm.h"

namespace tessera {

// The operation for `op` over `dtype` (bf16 or f16), created on first use (MPI must be initialised).
MPI_Op mpi_float16_op(DType dtype, ReduceOp op);

}  // namespace tessera
