// JSONL metrics writer, append-only.
#include "train/metrics_log.h"

#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"

namespace tessera {

namespace {

// The numbers of a metrics line, nested objects' under "key/inner"; "step" is the event's own.
void collect_scalars(const nlohmann::json& object, const std::string& prefix,
                     std::vector<std::pair<std::string, double>>& scalars) {
  for (const auto& [key, value] : object.items()) {
    if (prefix.empty() && key == "step") continue;
    if (value.is_number()) scalars.emplace_back(prefix + key, value.get<double>());
    if (value.is_object()) collect_scalars(value, prefix + key + "/", scalars);
  }
}

}  // namespace

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
