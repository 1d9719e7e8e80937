// JSONL metrics writer, append-only.
#include "train/metrics_log.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"

namespace tessera {

namespace {

// The numbers of a metrics line, nested objects' and arrays' under "key/inner" and "key/index";
// "step" is the event's own.
void collect_scalars(const nlohmann::json& object, const std::string& prefix,
                     std::vector<std::pair<std::string, double>>& scalars) {
  for (const auto& [key, value] : object.items()) {
    if (prefix.empty() && key == "step") continue;
    if (value.is_number()) scalars.emplace_back(prefix + key, value.get<double>());
    if (value.is_structured()) collect_scalars(value, prefix + key + "/", scalars);
  }
}

// Per layer (`load`'s runs of `per_layer` counts): the largest of its `groups` equal parts' sums over
// their mean; 0 for a layer with no count.
nlohmann::json max_over_mean(const std::vector<double>& load, size_t per_layer, size_t groups) {
  nlohmann::json layers = nlohmann::json::array();
  const size_t width = per_layer / groups;
  for (size_t first = 0; first + per_layer <= load.size(); first += per_layer) {
    double max = 0.0, sum = 0.0;
    for (size_t g = first; g < first + per_layer; g += width) {
      const double part = std::accumulate(load.begin() + long(g), load.begin() + long(g + width), 0.0);
      max = std::max(max, part), sum += part;
    }
    layers.push_back(sum > 0 ? max * double(groups) / sum : 0.0);
  }
  return layers;
}

}  // namespace

void add_moe_load_metrics(nlohmann::json& line, const std::vector<double>& routed, const std::vector<double>& kept,
                          int64_t num_experts, bool capacity, int64_t ep_ranks) {
  TS_CHECK(routed.size() == kept.size() && num_experts > 0 && routed.size() % size_t(num_experts) == 0,
           "add_moe_load_metrics: ", routed.size(), " routed and ", kept.size(), " kept counts for ", num_experts,
           " experts per layer");
  const double assignments = std::accumulate(routed.begin(), routed.end(), 0.0);
  const double dropped = assignments - std::accumulate(kept.begin(), kept.end(), 0.0);
  line["dropped_tokens"] = dropped;
  if (capacity) line["dropped_fraction"] = assignments > 0 ? dropped / assignments : 0.0;
  const size_t E = size_t(num_experts);
  const nlohmann::json layers = max_over_mean(routed, E, E);
  line["expert_load_max_over_mean"] = layers;
  line["expert_load_max"] = layers.empty() ? 0.0 : std::max_element(layers.begin(), layers.end())->get<double>();
  if (ep_ranks > 1) line["ep_load_max_over_mean"] = max_over_mean(kept, E, size_t(ep_ranks));
}

MetricsLog::MetricsLog(const std::filesystem::path& path, const std::filesystem::path& tensorboard_dir) : path_(path) {
  if (!tensorboard_dir.empty()) tensorboard_.emplace(tensorboard_dir);  // first: a bad folder leaves no metrics file
  std::error_code ec;
  // A FIFO would block the open and a device would swallow the metrics: only a regular file.
  if (std::filesystem::exists(path, ec)) require_regular_file(path, "--metrics-file");
  if (path.has_parent_path()) create_folder(path.parent_path(), "--metrics-file's folder");
  out_.open(path, std::ios::app);
  TS_CHECK(out_.good(), "--metrics-file: cannot write ", quoted_text(path.string()),
           "; check the folder exists and is writable, or choose another --metrics-file");
}

void MetricsLog::write(const nlohmann::json& line) {
  out_ << line.dump() << '\n';
  out_.flush();
  TS_CHECK(out_.good(), "--metrics-file: writing ", quoted_text(path_.string()),
           " failed (disk full?); the last checkpoint is kept, free space and resume with --resume");
  if (!tensorboard_ || !line.contains("step")) return;
  std::vector<std::pair<std::string, double>> scalars;
  collect_scalars(line, "", scalars);
  tensorboard_->write_scalars(line["step"].get<int64_t>(), scalars);
}

}  // namespace tessera
