// All-to-all attention over the cp group (DeepSpeed-Ulysses; Megatron's --cp-comm-type a2a), in the
// load-balanced layout of nn/context_parallel.h. Forward: one all-to-all trades every rank's local
// tokens of all heads for the whole sequence of 1/cp of the heads (cp rank j takes query heads
// [j·NH/cp, (j+1)·NH/cp) and their kv heads), whose rows are put back in sequence order; plain causal
// attention over the whole sequence runs there (ops/attention.h: on the GPU the tensor-core or cuDNN
// kernels, within documents under document masks, whose starts are all-gathered); a second all-to-all
// brings each rank its tokens' outputs (and log-sum-exps) of every head. Backward trades qkv, out, lse and
// dout the same way, runs the attention backward over the whole sequence and sends dqkv home. cp must
// divide the query and the kv heads (a tp rank's). Each exchange moves 1/cp of a rank's tensors, where the
// ring moves the whole kv block cp-1 times.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "parallel/cp/cp_group_attention.h"

namespace tessera {

class AllToAllAttention final : public CpGroupAttention {
 public:
  explicit AllToAllAttention(std::shared_ptr<Comm> cp) : CpGroupAttention(std::move(cp)) {}
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH, int NKV,
                         const Tensor& doc_starts, float softcap) override;
  void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          int NH, int NKV, const Tensor& doc_starts, float softcap) override;

 private:
  // A token's row as sections of heads ({NH, NKV, NKV} for qkv: q, k, v; {NH} for out), each
  // section split evenly over the group: head group j is the j-th share of every section.
  struct Heads {
    std::vector<int64_t> sections;
    int64_t head_size;
  };
  // local (B, T/cp, Σ sections·HS) -> (B, T, Σ sections·HS / cp): this rank's head group, every token.
  Tensor to_heads(const Tensor& local, const Heads& heads);
  // (B, T, Σ sections·HS / cp) of this rank's head group -> local (B, T/cp, Σ sections·HS), written.
  void to_tokens(Tensor& local, const Tensor& grouped, const Heads& heads);
  // lse (B, NH, T/cp) -> (B, NH/cp, T), and back.
  Tensor lse_to_heads(const Tensor& lse);
  void lse_to_tokens(Tensor& lse, const Tensor& grouped);
  // doc_starts (B, T/cp) i32 -> (B, T) of the whole sequences, or undefined.
  Tensor whole_doc_starts(const Tensor& doc_starts);
  void exchange(const Tensor& send, Tensor& received);  // the all-to-all, timed and counted
  void check_heads(int NH, int NKV) const;
};

}  // namespace tessera
