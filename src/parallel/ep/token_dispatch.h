// Expert parallelism's communication (issue 9): the MoE layer's token dispatch and combine as
// all-to-alls of variable counts over the grid's ep group (Megatron's AlltoAll token dispatcher).
// The counts travel first, then the rows (asynchronously, so the layer's shared experts compute
// meanwhile). It also measures what a step's metrics report: the time spent starting and waiting for
// the all-to-alls (not the work done meanwhile) and the bytes this rank sent.
#pragma once

#include <memory>

#include "nn/expert_parallel.h"
#include "parallel/comm.h"

namespace tessera {

struct EpTraffic {
  double seconds = 0.0;      // in all-to-alls (counts and rows, forward and backward)
  double bytes_sent = 0.0;
};

class EpAllToAll final : public ExpertParallel {
 public:
  // `device`: where the layer's tensors live (the counts travel there too).
  EpAllToAll(std::shared_ptr<Comm> ep, Device device);
  EpPlace place() const override { return {ep_->rank(), ep_->size()}; }
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& sent, int64_t local_experts,
                                       int64_t max_rows_per_peer) override;
  void exchange_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                     const std::vector<int64_t>& recv_rows, const std::function<void()>& meanwhile) override;
  // Since the last call: returns the traffic and starts counting again.
  EpTraffic take_traffic();

 private:
  std::shared_ptr<Comm> ep_;
  Device device_;
  EpTraffic traffic_;
};

}  // namespace tessera
