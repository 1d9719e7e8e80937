// CUDA launchers of the linear layer Y = X W^T + b through cuBLASLt (contract in ops/matmul.h).
// Raw device pointers queued on `stream`. T, the activation type of x, weight, bias, out, dout, dx
// and pre_gelu, is float, __nv_bfloat16 or __half; accumulation is fp32 and parameter gradients are fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/matmul_tuning.h"

namespace tessera::cuda {

// out (N,OC) = x (N,C) weight^T + bias; weight (OC,C), bias (OC) or null (fused as the epilogue).
// `choice`: how the algorithm is found (ops/matmul_tuning.h); with row_buckets, N is the bucketed count.
template <typename T>
void matmul_forward(T* out, const T* x, const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC,
                    cudaStream_t stream, MatmulAlgoChoice choice = MatmulAlgoChoice::exact);
// dx (N,C) written (skipped when null); dweight (OC,C) += (beta = 1); dbias (OC) += (skipped when
// null), a column sum over N in a fixed order.
template <typename T>
void matmul_backward(T* dx, float* dweight, float* dbias, const T* dout, const T* x, const T* weight, int64_t N,
                     int64_t C, int64_t OC, cudaStream_t stream, MatmulAlgoChoice choice = MatmulAlgoChoice::exact);
// pre_gelu (N,OC) = x weight^T + bias, out (N,OC) = gelu(pre_gelu): one call, GELU_AUX(_BIAS)
// epilogue. OC must be a multiple of 8 (throws otherwise).
template <typename T>
void matmul_gelu_forward(T* out, T* pre_gelu, const T* x, const T* weight, const T* bias, int64_t N, int64_t C,
                         int64_t OC, cudaStream_t stream);
// As matmul_backward with x = gelu(x_pre_gelu (N,C)): dx = (dout weight) * gelu'(x_pre_gelu),
// written, the DGELU epilogue. dx is required; C must be a multiple of 8 (throws otherwise).
template <typename T>
void matmul_backward_dgelu(T* dx, float* dweight, float* dbias, const T* dout, const T* x, const T* weight,
                           const T* x_pre_gelu, int64_t N, int64_t C, int64_t OC, cudaStream_t stream);

// ops/matmul_tuning.h's setting and records, for the GPU's matmuls.
void set_matmul_tuning(int candidates);
std::vector<MatmulTuningRecord> matmul_tuning_records();

// The cache of cuBLASLt plans (descriptors, layouts, heuristic's algorithm), one per problem.
struct MatmulPlanCacheStats {
  int64_t hits = 0, misses = 0;   // since the process started
  int64_t heuristic_queries = 0;  // cuBLASLt heuristic calls: misses less those a row bucket's algorithm served
  size_t plans = 0;               // held now
};
MatmulPlanCacheStats matmul_plan_cache_stats();

}  // namespace tessera::cuda
