// Expert parallelism's bookkeeping shared by the MoE layer and its communication.
#include "nn/expert_parallel.h"

namespace tessera {

std::vector<int64_t> rows_per_peer(const std::vector<int64_t>& counts, int64_t local_experts) {
  std::vector<int64_t> rows(counts.size() / size_t(local_experts), 0);
  for (size_t i = 0; i < counts.size(); ++i) rows[i / size_t(local_experts)] += counts[i];
  return rows;
}

}  // namespace tessera
