// Run-folder bookkeeping over std::filesystem; errors carry the folder and are one line.
#include "checkpoint/run_folder.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <system_error>

#include "checkpoint/train_checkpoint.h"
#include "core/error.h"
#include "core/user_text.h"

namespace tessera {
namespace fs = std::filesystem;
namespace {

// The step of a "ckpt-<digits>" name with at least 8 digits, if it is one.
std::optional<int64_t> step_of(const std::string& name) {
  constexpr std::string_view prefix = "ckpt-";
  if (!name.starts_with(prefix) || name.size() < prefix.size() + 8) return std::nullopt;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) return std::nullopt;
  return step;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%08lld", (long long)step);
  return name;
}

std::vector<CheckpointFolder> list_checkpoints(const fs::path& run_dir) {
  std::vector<CheckpointFolder> found;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return found;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir)) {
    std::optional<int64_t> step = step_of(e.path().filename().string());
    if (step && e.is_directory() && !e.is_symlink()) found.push_back({*step, e.path()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return found;
}

bool holds_checkpoints(const fs::path& run_dir) {
  std::error_code ec;
  return !list_checkpoints(run_dir).empty() || fs::is_symlink(run_dir / kLatestCheckpoint, ec);
}

void prune_checkpoints(const fs::path& run_dir, int64_t saved_step, Retention retention) {
  if (retention.keep <= 0) return;
  int64_t kept = 0;
  for (const CheckpointFolder& c : list_checkpoints(run_dir)) {
    if (c.step > saved_step) continue;
    const bool milestone = retention.every > 0 && c.step % retention.every == 0;
    if (kept++ >= retention.keep && !milestone) fs::remove_all(c.path);
  }
}

ResumePoint choose_resume_checkpoint(const fs::path& run_dir, FileShare share,
                                     const std::function<bool(bool)>& all_agree) {
  const fs::path latest = run_dir / kLatestCheckpoint;
  std::error_code ec;
  std::vector<std::string> skipped;
  if (fs::is_symlink(latest, ec) && !fs::exists(latest, ec))
    skipped.push_back(std::string(kLatestCheckpoint) + " points at " + quoted_text(fs::read_symlink(latest).string()) +
                      ", which does not exist");
  ResumePoint point;
  for (const CheckpointFolder& c : list_checkpoints(run_dir)) {
    std::string damage;  // a damaged one is skipped like a partial one
    try {
      check_checkpoint_complete(c.path, /*checksums=*/true, share);
    } catch (const Error& e) {
      damage = e.what();
    }
    if (all_agree ? all_agree(damage.empty()) : damage.empty()) {
      point.checkpoint = c.path;
      break;
    }
    skipped.push_back(damage.empty() ? c.path.filename().string() + " failed another process's checksum check"
                                     : damage);
  }
  std::string reasons;
  for (const std::string& s : skipped) reasons += (reasons.empty() ? "" : "; ") + s;
  if (!point.checkpoint && !skipped.empty())
    TS_FAIL("--resume: no complete checkpoint in ", quoted_text(run_dir.string()), " (", one_line(reasons, 600),
            "); restore one, or remove the run folder's ckpt-* entries to start afresh");
  if (!point.checkpoint)
    point.notice = "--resume: " + quoted_text(run_dir.string()) + " holds no checkpoint yet; starting at step 0";
  else if (!skipped.empty())
    point.notice = "--resume: skipped " + one_line(reasons, 600) + "; resuming from " +
                   point.checkpoint->filename().string();
  return point;
}

}  // namespace tessera
