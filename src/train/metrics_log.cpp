// JSONL metrics writer, append-only.
#include "train/metrics_log.h"

#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"

namespace tessera {

MetricsLog::MetricsLog(const std::filesystem::path& path) : path_(path) {
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
}

}  // namespace tessera
