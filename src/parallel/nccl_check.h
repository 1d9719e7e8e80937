// CUDA_CHECK(call) and NCCL_CHECK(call): a failed CUDA runtime or NCCL call becomes a tessera::Error
// naming the call and the library's own text for the code.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/error.h"

#define CUDA_CHECK(call)                                                                              \
  do {                                                                                                \
    cudaError_t ts_cuda_code_ = (call);                                                               \
    if (ts_cuda_code_ != cudaSuccess) TS_FAIL(#call, " failed: ", cudaGetErrorString(ts_cuda_code_)); \
  } while (0)

#define NCCL_CHECK(call)                                                                              \
  do {                                                                                                \
    ncclResult_t ts_nccl_code_ = (call);                                                              \
    if (ts_nccl_code_ != ncclSuccess) TS_FAIL(#call, " failed: ", ncclGetErrorString(ts_nccl_code_)); \
  } while (0)
