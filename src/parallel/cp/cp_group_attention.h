// What ring and all-to-all attention share: the cp group they exchange over, this rank's place in it,
// sums over it, and the stats of their exchanges (nn/context_parallel.h's ContextParallel).
#pragma once

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/context_parallel.h"
#include "parallel/comm.h"
#include "parallel/group_sum.h"

namespace tessera {

class CpGroupAttention : public ContextParallel {
 public:
  explicit CpGroupAttention(std::shared_ptr<Comm> cp) : cp_(std::move(cp)) {
    TS_CHECK(cp_ != nullptr, "context-parallel attention without a cp group");
  }
  CpPlace place() const override { return {cp_->rank(), cp_->size()}; }
  std::vector<double> sum_over_group(const std::vector<double>& values) override { return sum_over(*cp_, values); }
  CpCommStats stats() const override { return stats_; }
  void reset_stats() override { stats_ = {}; }

 protected:
  // Waits for `work`, the time counted as the exchanges' wait.
  void timed_wait(Work& work) {
    const auto start = std::chrono::steady_clock::now();
    work.wait();
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  std::shared_ptr<Comm> cp_;
  CpCommStats stats_;
};

}  // namespace tessera
