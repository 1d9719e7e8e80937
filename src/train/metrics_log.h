// The metrics file: one JSON object per line (JSONL), flushed after every line so a crashed run
// keeps everything up to its last step. Train lines: step, loss, lr, grad_norm, tokens_per_s,
// elapsed_s; eval lines: step, val_loss.
#pragma once

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tessera {

class MetricsLog {
 public:
  // append: keep the lines already there (a resumed run), dropping those past `keep_until_step`.
  MetricsLog(const std::filesystem::path& path, bool append, int64_t keep_until_step);
  void write(const nlohmann::json& line);

 private:
  std::ofstream out_;
};

}  // namespace tessera
