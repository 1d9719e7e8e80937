// The metrics file: one JSON object per line (JSONL), flushed after every line so a crashed run
// keeps everything up to its last step. Train lines: step, loss (the mean over the global batch's
// targets; null when not finite), lr (the step's), grad_norm (the global L2 norm before clipping),
// tokens_per_s (the global batch's tokens, every rank's, over the step's seconds: torchtitan's
// per-device tps is it over the ranks), tflops_per_rank and mfu (a fraction of the peak, not a
// percentage) from train_bench.h's FLOPs per token, step_s, elapsed_s, mem_mb and peak_mem_mb (the
// compute device's allocator, host RAM on the CPU, in MB of 10^6 bytes: a plan's GiB is 1073.74 MB;
// the peak since the process started); eval lines: step, val_loss. The file is
// only ever appended to: a resumed or restarted run adds its lines after those already there, never
// truncating them. With a TensorBoard folder, every number of a line also becomes a scalar at its
// step (nested objects' as "key/inner", arrays' as "key/index").
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/tensorboard_events.h"

namespace tessera {

// A MoE run's routing figures, added to `line` from one step's counts per expert of each MoE layer
// (layer-major, `num_experts` per layer), each summed once over the ranks that routed their own
// tokens: `routed` the router's choices, `kept` the rows the experts computed (fewer under a
// capacity). dropped_tokens: assignments dropped; dropped_fraction (with `capacity`): of those
// routed; expert_load_max_over_mean: per layer, the most chosen expert's count over the mean (1 is
// even, E/top_k all on the same experts); expert_load_max: its largest. With `ep_ranks` above 1,
// ep_load_max_over_mean: per layer, the busiest ep rank's kept rows (its experts') over the mean.
void add_moe_load_metrics(nlohmann::json& line, const std::vector<double>& routed, const std::vector<double>& kept,
                          int64_t num_experts, bool capacity, int64_t ep_ranks);

class MetricsLog {
 public:
  // Opens `path` for appending; it must be a regular file or not exist yet. A non-empty
  // `tensorboard_dir` gets a new event file (tensorboard_events.h).
  explicit MetricsLog(const std::filesystem::path& path, const std::filesystem::path& tensorboard_dir = {});
  // Throws when the line cannot be written (a full disk), naming the file.
  void write(const nlohmann::json& line);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  std::optional<TensorBoardEvents> tensorboard_;
};

}  // namespace tessera
