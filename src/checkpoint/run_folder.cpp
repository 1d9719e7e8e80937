// Run-folder bookkeeping over std::filesystem; errors carry the folder and are one line.
#include "checkpoint/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>
#include <mutex>
#include <cstdio>
#include <system_error>

#include "checkpoint/train_checkpoint.h"
#include "core/error.h"
#include "core/file_checks.h"
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

// Whether `name` is ".ckpt-<8+ digits>.tmp": an uncommitted save's folder.
bool is_unfinished_save_name(const std::string& name) {
  constexpr std::string_view prefix = ".", suffix = ".tmp";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return false;
  return step_of(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size())).has_value();
}

// Why `checkpoint` cannot be read for inference, or empty when it can.
std::string inference_damage(const fs::path& checkpoint) {
  try {
    check_checkpoint_complete(checkpoint, /*checksums=*/false, {}, CheckpointUse::inference);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
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
    point.notice = quoted_text(run_dir.string()) + " holds no checkpoint yet; starting at step 0";
  else if (!skipped.empty())
    point.notice = "--resume: skipped " + one_line(reasons, 600) + "; resuming from " +
                   point.checkpoint->filename().string();
  return point;
}

CheckpointToRead find_checkpoint_to_read(const fs::path& path) {
  std::error_code ec;
  if (fs::exists(path / "state.json", ec)) return {path, ""};
  std::vector<std::string> skipped;
  const fs::path latest = path / kLatestCheckpoint;
  if (fs::is_symlink(latest, ec) || fs::exists(latest, ec)) {
    const std::string target = fs::is_symlink(latest, ec) ? fs::read_symlink(latest, ec).string() : latest.string();
    if (!fs::exists(latest, ec)) {
      skipped.push_back(std::string(kLatestCheckpoint) + " points at " + quoted_text(target) + ", which does not exist");
    } else if (const std::string damage = inference_damage(fs::canonical(latest)); damage.empty()) {
      return {fs::canonical(latest), ""};
    } else {
      skipped.push_back(std::string(kLatestCheckpoint) + " (" + damage + ")");
    }
  }
  CheckpointToRead found;
  for (const CheckpointFolder& c : list_checkpoints(path)) {
    if (fs::exists(latest, ec) && fs::equivalent(latest, c.path, ec)) continue;  // named above
    if (const std::string damage = inference_damage(c.path); !damage.empty()) {
      skipped.push_back(damage);
      continue;
    }
    found.checkpoint = c.path;
    break;
  }
  std::string reasons;
  for (const std::string& s : skipped) reasons += (reasons.empty() ? "" : "; ") + s;
  TS_CHECK(!found.checkpoint.empty(), "--checkpoint: no checkpoint at ", quoted_text(path.string()),
           " (expected state.json or ckpt-latest there", skipped.empty() ? "" : "; skipped " + one_line(reasons, 600),
           ")");
  if (!skipped.empty())
    found.notice = "--checkpoint: skipped " + one_line(reasons, 600) + "; reading " + found.checkpoint.filename().string();
  return found;
}

std::string checkpoint_noting(const std::string& path) {
  if (path.empty()) return path;
  const CheckpointToRead found = find_checkpoint_to_read(path);
  if (!found.notice.empty()) std::fprintf(stderr, "%s\n", found.notice.c_str());
  return found.checkpoint.string();
}

RemovedSaves remove_unfinished_saves(const fs::path& run_dir) {
  RemovedSaves removed;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return removed;
  std::vector<fs::path> leftovers;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec))
    if (is_unfinished_save_name(e.path().filename().string()) && e.is_directory(ec) && !e.is_symlink(ec))
      leftovers.push_back(e.path());
  for (const fs::path& folder : leftovers) {
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(folder, ec))
      if (e.is_regular_file(ec) && !e.is_symlink(ec)) removed.bytes += e.file_size(ec);
    fs::remove_all(folder);
    ++removed.folders;
  }
  return removed;
}

namespace {

// The run folders this process has locked, by the folder's device and inode, with their holders: a
// second lock on one of them (a library user's or a test's second Trainer) shares the first.
struct HeldLock {
  int fd = -1;
  int holders = 0;
  bool created_folder = false;  // the first holder made the folder: the last removes it if still empty
};
std::mutex g_locks_mutex;
std::map<std::pair<dev_t, ino_t>, HeldLock> g_locks;

// The holder a lock file records ("pid 12 on node3"), for the refusal.
std::string recorded_holder(int fd) {
  char text[300] = "";
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string holder(text, size_t(std::max<ssize_t>(n, 0)));
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return one_line(holder, 200);
}

// Whether `fd` is still the file at `path` (the last holder unlinks it as it lets go).
bool still_linked(int fd, const fs::path& path) {
  struct stat opened {}, named {};
  return ::fstat(fd, &opened) == 0 && ::stat(path.c_str(), &named) == 0 && opened.st_dev == named.st_dev &&
         opened.st_ino == named.st_ino;
}

// Locks run_dir's lock file: its descriptor, or -1 where the file system has no flock. Throws naming
// the holder when another process has it.
int lock_folder(const fs::path& run_dir) {
  const fs::path file = run_dir / kRunFolderLock;
  for (;;) {
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    TS_CHECK(fd >= 0, "--out-dir ", quoted_text(run_dir.string()), ": cannot create ", quoted_text(file.string()),
             " (", errno_text(errno), "); check the folder is writable");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int lock_errno = errno;
      const std::string holder = lock_errno == EWOULDBLOCK ? recorded_holder(fd) : "";
      ::close(fd);
      if (lock_errno != EWOULDBLOCK) return -1;  // no flock here (ENOSYS, EOPNOTSUPP, ENOLCK): unlocked
      TS_FAIL("--out-dir ", quoted_text(run_dir.string()), " is in use by another run (",
              holder.empty() ? std::string("its ") + kRunFolderLock + " is locked" : holder,
              "); wait for it to end, or choose another --out-dir (nothing was changed)");
    }
    if (!still_linked(fd, file)) {  // locked a file its holder unlinked as we opened it: again
      ::close(fd);
      continue;
    }
    char host[256] = "";
    ::gethostname(host, sizeof host - 1);
    const std::string holder = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
    if (::pwrite(fd, holder.data(), holder.size(), 0) < 0 || ::ftruncate(fd, off_t(holder.size())) != 0) {
      // The record only words a later refusal; the lock holds without it.
    }
    return fd;
  }
}

}  // namespace

RunFolderLock::RunFolderLock(const fs::path& run_dir) {
  std::error_code exists_error;
  const bool created = !fs::exists(run_dir, exists_error);
  create_folder(run_dir, "--out-dir");
  struct stat folder {};
  TS_CHECK(::stat(run_dir.c_str(), &folder) == 0, "--out-dir ", quoted_text(run_dir.string()), ": ", errno_text(errno));
  key_ = {folder.st_dev, folder.st_ino};
  file_ = run_dir / kRunFolderLock;
  const std::lock_guard<std::mutex> guard(g_locks_mutex);
  auto held = g_locks.find(key_);
  if (held == g_locks.end()) held = g_locks.emplace(key_, HeldLock{lock_folder(run_dir), 0, created}).first;
  ++held->second.holders;
}

RunFolderLock::~RunFolderLock() {
  const std::lock_guard<std::mutex> guard(g_locks_mutex);
  auto held = g_locks.find(key_);
  if (held == g_locks.end() || --held->second.holders > 0) return;
  if (held->second.fd >= 0) {
    ::unlink(file_.c_str());  // while locked, so that no other process holds it; the folder is as it was
    ::close(held->second.fd);
  }
  if (held->second.created_folder) {  // a run refused before it wrote anything leaves no folder behind
    std::error_code not_empty;
    fs::remove(file_.parent_path(), not_empty);
  }
  g_locks.erase(held);
}

}  // namespace tessera
