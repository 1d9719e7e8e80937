// TS_HOST_DEVICE marks a function that host C++ and CUDA kernels both call (__host__ __device__
// under nvcc, nothing elsewhere), so one definition of an element's arithmetic serves the CPU
// reference and the GPU kernel.
#pragma once

#if defined(__CUDACC__)
#define TS_HOST_DEVICE __host__ __device__
#else
#define TS_HOST_DEVICE
#endif
