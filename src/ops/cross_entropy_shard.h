// Vocabulary-parallel softmax cross-entropy, the local parts (Megatron's): a tensor-parallel rank
// holds logits_shard (N,Vs), columns [first_col, first_col + Vs) of the whole (N,Vp) logits, whose
// columns [V, Vp) are padding (never predicted, gradient 0). targets (N) i32 in [0, V), or
// kIgnoredTarget: that row's loss and gradient are 0, as in softmax_cross_entropy.
//   1. cross_entropy_shard_stats: per row, the max over the shard's real columns (-inf when it has
//      none), the sum of exp(x - that max), and the target's logit when the shard holds the target
//      column (else 0).
//   2. The caller reduces over the ranks: the max (MAX); then cross_entropy_shard_rescale refers each
//      rank's sum to the global max; then the sums and the target logits (SUM).
//   3. cross_entropy_shard_finish: losses (N) = log(sum) + max - target logit on every rank, and when
//      dloss != 0 the shard overwritten in place with dloss * (softmax - onehot(target)), as
//      softmax_cross_entropy does for a whole row.
// softcap > 0: the shard holds logit_softcap's capped logits, and finish writes the raw logits' gradient, as
// softmax_cross_entropy does (CPU only).
// Dtypes: logits f32, or bf16/f16 on the GPU (computed in fp32); statistics and losses f32 (N).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera {

void cross_entropy_shard_stats(Tensor& max, Tensor& sum_exp, Tensor& target_logit, const Tensor& logits_shard,
                               const Tensor& targets, int64_t first_col, int64_t vocab_size);
// sum_exp *= exp(local_max - global_max), 0 where the shard had no real column.
void cross_entropy_shard_rescale(Tensor& sum_exp, const Tensor& local_max, const Tensor& global_max);
void cross_entropy_shard_finish(Tensor& losses, Tensor& logits_shard, const Tensor& targets, const Tensor& max,
                                const Tensor& sum_exp, const Tensor& target_logit, int64_t first_col,
                                int64_t vocab_size, float dloss, float softcap = 0.0f);

}  // namespace tessera
