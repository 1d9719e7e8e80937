// JSONL metrics writer.
#include "train/metrics_log.h"

#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace tessera {

MetricsLog::MetricsLog(const std::filesystem::path& path, bool append, int64_t keep_until_step) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::vector<std::string> kept;
  if (append) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", int64_t(0)) <= keep_until_step) kept.push_back(line);
    }
  }
  out_.open(path, std::ios::trunc);
  TS_CHECK(out_.good(), "--metrics-file: cannot write '", path.string(), "'");
  for (const std::string& line : kept) out_ << line << '\n';
  out_.flush();
}

void MetricsLog::write(const nlohmann::json& line) {
  out_ << line.dump() << '\n';
  out_.flush();
}

}  // namespace tessera
