// The Mixture-of-Experts router: per token, scores over E experts from its logits, the top-K
// experts and their weights (renormalised or not); the load-balancing (aux) and z losses; the backward of
// the weights and both losses to the logits. Selection is piecewise constant and carries no
// gradient. N tokens, E experts, K choices per token. logits and dlogits are in the activation
// dtype (f32 anywhere, bf16 or f16 on the GPU); every other float tensor is f32 (fp32 routing).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tessera {

enum class RouterScore { softmax, sigmoid };

// Group-limited routing (DeepSeek's): the E experts in `count` equal groups of consecutive experts;
// a token keeps the `kept` groups of the best group scores (ties to the lower group) and its experts
// outside them take selection value 0 (Hugging Face's masked_fill with 0, not -inf). A group's score
// is the sum of its two best selection values under sigmoid scoring (DeepSeek-V3) and its best one
// under softmax (DeepSeek-V2's group_limited_greedy). count 1: no limit.
struct RouterGroups {
  int64_t count = 1, kept = 1;
  bool limits() const { return count > 1 && kept < count; }
};

// logits (N,E). bias (E) or undefined: added to the scores for SELECTION only (DeepSeek-V3's
// aux-loss-free balancing); sigmoid only, must be undefined for softmax.
// Written:
//   scores (N,E):  softmax(logits) per row, or sigmoid(logits) elementwise.
//   lse (N):       logsumexp of each logits row (for the z-loss), for both kinds.
//   experts (N,K) i32: the top-K experts by score + bias (after the group limit), in descending order
//                  of that value; ties go to the lower expert index first.
//   weights (N,K): the chosen experts' scores (without bias) divided by their sum over the row, or
//                  without `renormalize` the scores themselves (Hugging Face's norm_topk_prob false).
void moe_router_forward(Tensor& experts, Tensor& weights, Tensor& scores, Tensor& lse, const Tensor& logits,
                        const Tensor& bias, RouterScore kind, bool renormalize = true, RouterGroups groups = {});

// The auxiliary losses of one routing, as doubles on the host:
//   aux = E * sum_e (count_e / N) * P_e, count_e = #{(n,k) : experts[n,k] == e} (they sum to N*K),
//         P_e = mean_n p[n,e], p = scores for softmax, p = scores / (row sum of scores) for sigmoid.
//         Perfectly balanced routing with uniform p gives aux = K.
//   z   = mean_n lse[n]^2.
struct RouterLosses {
  double aux = 0, z = 0;
};
// aux's statistics: count_e and sum_n P (per expert) over `tokens` tokens. Ranks holding parts of
// the same sequences (context parallelism) sum them, and each takes aux and its gradient over all
// those tokens.
struct RouterBalance {
  std::vector<double> counts, prob_sums;  // (E)
  double tokens = 0;
  double aux() const;  // E * sum_e (counts_e / tokens) * (prob_sums_e / tokens)
};
// With `balance`, also this routing's statistics.
RouterLosses moe_router_losses(const Tensor& experts, const Tensor& scores, const Tensor& lse, RouterScore kind,
                               RouterBalance* balance = nullptr);

// dlogits (N,E) WRITTEN: the gradient with respect to logits of
//   sum_{n,k} dweights[n,k] * weights[n,k] + aux_scale * aux + z_scale * z,
// the counts of aux held constant. dweights, weights (N,K); the rest as the forward wrote them.
// With `balance`, aux is the one of those (summed) statistics: its counts and tokens, not this
// routing's, weigh the gradient. `renormalize` as the forward's.
void moe_router_backward(Tensor& dlogits, const Tensor& dweights, const Tensor& experts, const Tensor& weights,
                         const Tensor& scores, const Tensor& lse, const Tensor& logits, RouterScore kind,
                         float aux_scale, float z_scale, const RouterBalance* balance = nullptr,
                         bool renormalize = true);

}  // namespace tessera
