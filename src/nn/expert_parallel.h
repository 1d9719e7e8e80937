// Expert parallelism as the MoE layer sees it (issue 9, Megatron's convention): the experts of every
// MoE layer are shared out over the ep group, rank r holding experts [r·E/ep, (r+1)·E/ep), and the
// tokens routed to an expert travel to its rank and back with all-to-alls of variable counts, which
// parallel/ep implements over the ep group (nn holds no collectives).
// A rank's routed rows are in global expert order, so the rows for each peer are contiguous; a
// peer's rows arrive grouped by source rank, then by the receiver's local expert.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace tessera {

struct EpPlace {
  int rank = 0, size = 1;
};

class ExpertParallel {
 public:
  virtual ~ExpertParallel() = default;
  virtual EpPlace place() const = 0;
  // The counts, first: `sent` holds, for each peer p and each of its local experts j, the rows this
  // rank sends (index p·local_experts + j). Returns the rows each peer sends this rank, indexed
  // alike (p·local_experts + j for this rank's expert j). Every received count is checked to lie in
  // [0, max_rows_per_peer]: a malformed one stops the job with a message instead of sizing a buffer.
  virtual std::vector<int64_t> exchange_counts(const std::vector<int64_t>& sent, int64_t local_experts,
                                               int64_t max_rows_per_peer) = 0;
  // Rows of (rows, C) tensors: send_rows[p] consecutive rows of `send` go to peer p, in peer order; `recv` receives
  // recv_rows[p] rows from each peer p, in peer order. `meanwhile` (when set) runs while the rows travel:
  // work that touches neither tensor (the shared experts), hidden behind the exchange.
  virtual void exchange_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                             const std::vector<int64_t>& recv_rows, const std::function<void()>& meanwhile) = 0;
};

// Sums of `counts` (peers · local_experts, as exchange_counts returns them) per peer.
std::vector<int64_t> rows_per_peer(const std::vector<int64_t>& counts, int64_t local_experts);

}  // namespace tessera
