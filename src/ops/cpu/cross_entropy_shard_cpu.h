// CPU kernels of the vocabulary-parallel cross-entropy's local parts (contract in
// ops/cross_entropy_shard.h). real = the shard's columns below the vocabulary size.
#pragma once

#include <cstdint>

namespace tessera::cpu {

void cross_entropy_shard_stats(float* max, float* sum_exp, float* target_logit, const float* logits,
                               const int32_t* targets, int64_t N, int64_t Vs, int64_t first_col, int64_t real);
void cross_entropy_shard_rescale(float* sum_exp, const float* local_max, const float* global_max, int64_t N);
void cross_entropy_shard_finish(float* losses, float* logits, const int32_t* targets, const float* max,
                                const float* sum_exp, const float* target_logit, int64_t N, int64_t Vs,
                                int64_t first_col, int64_t real, float dloss, float softcap);

}  // namespace tessera::cpu
