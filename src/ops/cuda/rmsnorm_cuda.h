// CUDA launchers of RMSNorm over the last dimension (contract in ops/rmsnorm.h).
// Raw device pointers; activations and weight of storage T = float, __nv_bfloat16 or __half
// (arithmetic fp32), rstd and dweight fp32; queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (N,C), rstd (N) from x (N,C), weight (C). With `sums`, each row is C of `width` channels split
// over a group and sums (N) holds the group's Σ x² (contract in ops/rmsnorm.h).
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* x, const T* weight, int64_t N, int64_t C, float eps,
                     cudaStream_t stream, const float* sums = nullptr, int64_t width = 0);
// residual_out (N,C) = a (N,C) + b (N,C), then out, rstd = RMSNorm(residual_out) as above, in one kernel.
template <typename T>
void residual_rmsnorm_forward(T* residual_out, T* out, float* rstd, const T* a, const T* b, const T* weight,
                              int64_t N, int64_t C, float eps, cudaStream_t stream);
// dx (N,C) written, or added to when add_to_dx (in fp32, rounded once); dweight (C) accumulated,
// summed over rows in a fixed order.
// With `dots`, the group's Σ dout·weight·xhat of each row of `width` channels.
template <typename T>
void rmsnorm_backward(T* dx, float* dweight, const T* dout, const T* x, const T* weight, const float* rstd,
                      int64_t N, int64_t C, bool add_to_dx, cudaStream_t stream, const float* dots = nullptr,
                      int64_t width = 0);
// A grouped row's share of its statistics: sums (N) = Σ x², dots (N) = Σ dout·weight·x·rstd.
template <typename T>
void rmsnorm_partial_sums(float* sums, const T* x, int64_t N, int64_t C, cudaStream_t stream);
template <typename T>
void rmsnorm_partial_dots(float* dots, const T* dout, const T* x, const T* weight, const float* rstd, int64_t N,
                          int64_t C, cudaStream_t stream);

}  // namespace tessera::cuda
