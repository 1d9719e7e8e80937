// Check macros for CUDA runtime and cuBLAS/cuBLASLt calls: a failing call throws tessera::Error
// naming the call, the library's error name and its text. Only for files built with the CUDA
// backend (TESSERA_WITH_CUDA); CUDA_CHECK_LAUNCH() checks the last kernel launch.
#pragma once

#include <cuda_runtime.h>

#include "core/cuda/cublaslt.h"
#include "core/error.h"

#define CUDA_CHECK(call)                                                                              \
  do {                                                                                                \
    const cudaError_t cuda_check_status_ = (call);                                                    \
    if (cuda_check_status_ != cudaSuccess)                                                            \
      ::tessera::detail::throw_error(__FILE__, __LINE__, #call, " failed: ",                          \
                                     cudaGetErrorName(cuda_check_status_), " (",                      \
                                     cudaGetErrorString(cuda_check_status_), ")");                    \
  } while (0)

#define CUBLAS_CHECK(call)                                                                            \
  do {                                                                                                \
    const cublasStatus_t cublas_check_status_ = (call);                                               \
    if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::tessera::detail::throw_error(__FILE__, __LINE__, #call, " failed: ",                          \
                                     ::tessera::cuda::cublaslt().GetStatusName(cublas_check_status_), \
                                     " (", ::tessera::cuda::cublaslt().GetStatusString(cublas_check_status_), \
                                     ")");                                                            \
  } while (0)

// After a <<<...>>> launch: a bad configuration shows up here, not at the next synchronising call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
