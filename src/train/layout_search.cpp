// The layout search: every split of the ranks, ZeRO stage and recomputation mode, planned.
#include "train/layout_search.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "nn/recompute.h"
#include "train/model_setup.h"
#include "parallel/pp/pipeline_schedule.h"

namespace tessera {
namespace {

constexpr int kMaxTp = 8;  // tensor parallelism stays within a node's GPUs
constexpr int kMaxWorld = 1 << 16;

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

// The order of the list: a smaller key first.
auto rank_key(const LayoutCandidate& c) {
  const TrainConfig& f = c.config;
  // ZeRO-3 keeping the gathered parameters (one all-gather a step) before resharding them (two).
  const int zero = 2 * f.zero + (f.zero == 3 && f.reshard_after_forward);
  return std::make_tuple(int(parse_recompute(f.recompute)), f.tp * f.pp * f.cp * f.ep, zero, -f.micro_batch_size,
                         f.tp, f.pp, f.cp_comm != TrainConfig{}.cp_comm);
}

// The candidates of one split of the ranks (`c`'s dp, tp, pp, cp, ep): each ZeRO stage (none without a
// data-parallel group to shard over; ZeRO-3 resharding its parameters after the forward or keeping
// them) with each recomputation mode that fits a larger micro-batch than less recomputation did.
void add_candidates(std::vector<LayoutCandidate>& found, TrainConfig c, const ModelConfig& model, DType compute,
                    int64_t most_micro_batch, int64_t device_bytes, int64_t reserve_bytes) {
  for (int stage = 0; stage <= 4; ++stage) {  // 0-3, then 3 keeping the gathered parameters
    const int zero = std::min(stage, 3);
    if (zero > 0 && c.dp * c.cp == 1) continue;
    c.reshard_after_forward = stage != 4;
    int64_t micro_batch = 0;  // the largest so far with less recomputation
    for (const char* recompute : {"none", "selective", "full"}) {
      c.zero = zero, c.recompute = recompute, c.recompute_layers = 0;
      std::optional<MemoryPlan> plan =
          plan_largest_micro_batch(c, model, compute, Device::cuda, device_bytes, most_micro_batch, reserve_bytes);
      if (!plan || plan->micro_batch <= micro_batch) continue;  // more recomputation for nothing only costs time
      micro_batch = plan->micro_batch;
      TrainConfig sized = c;
      sized.micro_batch_size = plan->micro_batch;
      found.push_back({sized, std::move(*plan)});
    }
  }
}

}  // namespace

std::vector<LayoutCandidate> search_layouts(const TrainConfig& config, const ModelConfig& model, DType compute,
                                            int world, int64_t device_bytes, int64_t reserve_bytes) {
  TS_CHECK(world >= 1 && world <= kMaxWorld, "--world must be between 1 and ", kMaxWorld, " ranks, got ", world);
  // Said once here rather than by every pipeline layout failing alike.
  TS_CHECK(config.virtual_stages >= 1, "--virtual-stages must be at least 1, got ", config.virtual_stages);
  const ScheduleKind schedule = parse_schedule_kind(config.pipeline_schedule);  // a bad name, said before any layout
  TS_CHECK(config.virtual_stages == 1 || schedule == ScheduleKind::interleaved,
           "--virtual-stages ", config.virtual_stages, " needs --pipeline-schedule interleaved, not ",
           config.pipeline_schedule);
  // The flags every layout shares, checked once with train's own words (a --batch-size of 0, a
  // --seq-len past the model's context) rather than read as "no layout fits".
  TrainConfig checked = config;
  checked.train_data = "(planned)";
  checked.dp = 1, checked.tp = checked.pp = checked.cp = checked.ep = 1, checked.zero = 0;
  checked.micro_batch_size = 0;
  checked.virtual_stages = 1, checked.pipeline_schedule = TrainConfig{}.pipeline_schedule;  // pipelines' own, above
  checked.validate();
  check_flags_against_model(checked, model);
  std::vector<LayoutCandidate> found;
  for (int tp : divisors(world)) {
    if (tp > kMaxTp) continue;
    for (int pp : divisors(world / tp))
      for (int cp : divisors(world / tp / pp)) {
        const int dp = world / tp / pp / cp;
        if (config.batch_size % dp != 0) continue;
        // A pipeline runs at least pp micro-batches a step: with fewer, its stages wait on each other
        // (one micro-batch: each stage works 1/pp of the step).
        const int64_t most_micro_batch = config.batch_size / dp / pp;
        if (most_micro_batch < 1) continue;
        // Context parallelism's two ways (all-to-all only where cp divides the heads: plan_memory says).
        const std::vector<std::string> cp_comms =
            cp > 1 ? std::vector<std::string>{"ring", "all-to-all"} : std::vector<std::string>{config.cp_comm};
        for (int ep : model.moe.enabled() ? divisors(dp) : std::vector<int>{1})
          for (const std::string& cp_comm : cp_comms) {
            TrainConfig c = config;
            c.dp = dp, c.tp = tp, c.pp = pp, c.cp = cp, c.ep = ep, c.cp_comm = cp_comm;
            c.virtual_stages = pp > 1 ? config.virtual_stages : 1;  // the schedule's own chunks per rank
            add_candidates(found, c, model, compute, most_micro_batch, device_bytes, reserve_bytes);
          }
      }
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const LayoutCandidate& a, const LayoutCandidate& b) { return rank_key(a) < rank_key(b); });
  return found;
}

}  // namespace tessera
