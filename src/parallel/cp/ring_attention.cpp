// Ring attention's loops. Each ring transfer is a send to rank+1 and a receive from rank-1 on one tag, so
// the messages between two ranks match in posting order; both sides post them in the same order every
// step (the kv block, then in backward the dK/dV accumulator), which keeps blocks and accumulators apart.
#include "parallel/cp/ring_attention.h"

#include <utility>

#include "core/cuda/device.h"
#include "core/error.h"
#include "ops/residual.h"

namespace tessera {

RingAttention::Hop RingAttention::pass_on(const Tensor& block, Tensor& incoming) {
  const int rank = cp_->rank(), size = cp_->size();
  Work received = cp_->recv_async(incoming, (rank + size - 1) % size);
  Work sent = cp_->send_async(block, (rank + 1) % size);
  stats_.bytes_sent += int64_t(block.bytes());
  return {std::move(sent), std::move(received)};
}

void RingAttention::wait(Hop& hop) {
  timed_wait(hop.sent);
  timed_wait(hop.received);
}

std::vector<std::vector<int32_t>> RingAttention::positions_by_rank(int64_t local_T) const {
  const CpPlace me = place();
  cp_check_seq_len(local_T * me.size, me);
  std::vector<std::vector<int32_t>> by_rank;
  for (int r = 0; r < me.size; r++) by_rank.push_back(cp_positions(local_T * me.size, {r, me.size}));
  return by_rank;
}

BlockPositions RingAttention::step_positions(const std::vector<std::vector<int32_t>>& by_rank, int step) const {
  const int rank = cp_->rank(), size = cp_->size();
  return {by_rank[size_t(rank)], by_rank[size_t((rank - step + size) % size)]};
}

void RingAttention::attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int NH, int NKV,
                                      const Tensor& doc_starts, float softcap) {
  Tensor block = attention_block_kv(qkv, NH, NKV), next = Tensor::zeros(block.shape(), DType::f32, block.device());
  const std::vector<std::vector<int32_t>> positions = positions_by_rank(qkv.size(1));
  const int size = cp_->size();
  for (int step = 0; step < size; step++) {
    // The next block is on its way before this one's compute starts; `block` is only read meanwhile.
    Hop hop = step + 1 < size ? pass_on(block, next) : Hop{};
    attention_block_forward(out, lse, qkv, block, step_positions(positions, step), NH, NKV, step == 0, doc_starts,
                            softcap);
    wait(hop);
    std::swap(block, next);
  }
}

void RingAttention::attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                       const Tensor& lse, int NH, int NKV, const Tensor& doc_starts, float softcap) {
  const Device device = qkv.device();
  Tensor block = attention_block_kv(qkv, NH, NKV), next = Tensor::zeros(block.shape(), DType::f32, device);
  const std::vector<std::vector<int32_t>> positions = positions_by_rank(qkv.size(1));
  Tensor delta = Tensor::zeros(lse.shape(), DType::f32, device);
  attention_block_delta(delta, dout, out, NH);
  zero_tensor(dqkv);  // dq adds up step by step; dk and dv are written last
  // The accumulator of the block in hand (two, so that one can fill while the other is still being sent)
  // and the one arriving from rank-1 for the next step's block.
  Tensor partial[2] = {Tensor::zeros(block.shape(), DType::f32, device),
                       Tensor::zeros(block.shape(), DType::f32, device)};
  Tensor arrived = Tensor::zeros(block.shape(), DType::f32, device);
  Hop accumulated;
  const int size = cp_->size();
  for (int step = 0; step < size; step++) {
    Hop kv_hop = step + 1 < size ? pass_on(block, next) : Hop{};
    Tensor& acc = partial[step % 2];  // its send, posted two steps ago, was waited last step
    zero_tensor(acc);
    attention_block_backward(dqkv, acc, dout, qkv, block, lse, delta, step_positions(positions, step), NH, NKV,
                             doc_starts, softcap);
    if (step > 0) {  // the other ranks' share of this block, sent by rank-1 after its previous step
      wait(accumulated);
      add_inplace(acc, arrived);
    }
    if (size > 1) accumulated = pass_on(acc, arrived);
    wait(kv_hop);
    std::swap(block, next);
  }
  wait(accumulated);  // the last hop: this rank's own block, with every rank's share
  attention_block_kv_to_qkv(dqkv, size > 1 ? arrived : partial[0], NH, NKV);
}

}  // namespace tessera
