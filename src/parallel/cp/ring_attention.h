// Ring attention (Liu et al. 2023) over the cp group, in the load-balanced layout of nn/context_parallel.h.
// Forward: the [k | v] block of each rank's local tokens travels the ring rank -> rank+1; at step s a
// rank holds the block of rank - s (its positions follow from that owner) and merges its attention into
// the running out and lse (ops/attention_block.h). The send of the block in hand and the receive of the
// next are posted before the step's compute and waited after it (double buffer): the transfer overlaps
// the compute. Backward: the blocks travel again, each with a dK/dV accumulator that every rank adds
// its queries' share to before passing it on; after the cp steps one last hop brings each accumulator
// home, summed over the group. dQ accumulates locally. cp = 1 runs the same loop: one step, no transfer.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "parallel/cp/cp_group_attention.h"
#include "ops/attention_block.h"

namespace tessera {

class RingAttention final : public CpGroupAttention {
 public:
  explicit RingAttention(std::shared_ptr<Comm> cp) : CpGroupAttention(std::move(cp)) {}
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH, int NKV,
                         const Tensor& doc_starts, float softcap) override;
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          int NH, int NKV, const Tensor& doc_starts, float softcap) override;

 private:
  // The two halves of one ring transfer: a block to rank+1, the next from rank-1.
  struct Hop {
    Work sent, received;
  };
  Hop pass_on(const Tensor& block, Tensor& incoming);
  void wait(Hop& hop);
  // The true positions of every rank's local tokens, for local sequences of `local_T` tokens.
  std::vector<std::vector<int32_t>> positions_by_rank(int64_t local_T) const;
  // The local queries' and the step's kv block's positions: the block of rank - step.
  BlockPositions step_positions(const std::vector<std::vector<int32_t>>& by_rank, int step) const;
};

}  // namespace tessera
