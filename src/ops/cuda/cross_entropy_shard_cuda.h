// CUDA launchers of the vocabulary-parallel cross-entropy's local parts (contract in
// ops/cross_entropy_shard.h): one block per row; real = the shard's columns below the vocabulary.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

template <typename T>
void cross_entropy_shard_stats(float* max, float* sum_exp, float* target_logit, const T* logits,
                               const int32_t* targets, int64_t N, int64_t Vs, int64_t first_col, int64_t real,
                               cudaStream_t stream);
void cross_entropy_shard_rescale(float* sum_exp, const float* local_max, const float* global_max, int64_t N,
                                 cudaStream_t stream);
template <typename T>
void cross_entropy_shard_finish(float* losses, T* logits, const int32_t* targets, const float* max,
                                const float* sum_exp, const float* target_logit, int64_t N, int64_t Vs,
                                int64_t first_col, int64_t real, float dloss, cudaStream_t stream);

}  // namespace tessera::cuda
