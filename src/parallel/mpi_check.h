// MPI_CHECK(call): MPI errors as tessera::Error naming the call and MPI's own text for the code.
// Works because the Runtime sets MPI_ERRORS_RETURN on MPI_COMM_WORLD, which every communicator
// split from it inherits; without that, MPI would abort the job before the check could run.
#pragma once

#include <mpi.h>

#include "core/error.h"

namespace tessera::detail {

inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, length);
}

}  // namespace tessera::detail

#define MPI_CHECK(call)                                                                           \
  do {                                                                                            \
    int ts_mpi_code_ = (call);                                                                    \
    if (ts_mpi_code_ != MPI_SUCCESS)                                                              \
      TS_FAIL(#call, " failed: ", ::tessera::detail::mpi_error_text(ts_mpi_code_));               \
  } while (0)
