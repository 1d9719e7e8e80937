// A run folder's checkpoints: ckpt-<step> folders (8+ digits) and the ckpt-latest symlink. Lists
// them, prunes all but the newest few after a save, and picks the checkpoint --resume continues
// from: the newest complete one, naming every newer one it had to skip. A run that trains into a
// folder locks it (RunFolderLock), so that a second run into the same folder is refused.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace tessera {

inline constexpr const char* kLatestCheckpoint = "ckpt-latest";

// "ckpt-00000042" for step 42.
std::string checkpoint_dir_name(int64_t step);

struct CheckpointFolder {
  int64_t step = 0;
  std::filesystem::path path;
};

// The ckpt-<step> folders of run_dir, newest first (none when run_dir does not exist).
std::vector<CheckpointFolder> list_checkpoints(const std::filesystem::path& run_dir);

// True when run_dir holds a ckpt-<step> folder or a ckpt-latest link (even a dangling one).
bool holds_checkpoints(const std::filesystem::path& run_dir);

// Which checkpoints a run keeps: the newest `keep` (0 = all) and every milestone whose step is a
// multiple of `every` (0 = none).
struct Retention {
  int64_t keep = 3;
  int64_t every = 0;
};

// After ckpt-<saved_step> was committed: removes the ckpt-<step> folders with step <= saved_step
// beyond the newest retention.keep of them, except milestones. Folders of later steps (a run resumed
// from an older checkpoint) are never removed.
void prune_checkpoints(const std::filesystem::path& run_dir, int64_t saved_step, Retention retention);

// The files of a checkpoint one process checks by CRC-32 when several share the work: file i (in
// name order) when i % count == index. The default is every file.
struct FileShare {
  int index = 0, count = 1;
};

struct ResumePoint {
  std::optional<std::filesystem::path> checkpoint;  // none: run_dir holds no checkpoint at all; else its
                                                    // files' sizes and CRC-32 are verified
  std::string notice;  // what was skipped, or that the run starts afresh; empty when nothing to say
};

// The newest complete checkpoint of run_dir (state.json readable, every file present at its
// recorded size and CRC-32); throws naming what is wrong when run_dir holds checkpoints but none is.
// Several processes share the CRC-32 reads: each checks the files of `share` of every candidate, and
// `all_agree` (a collective AND over them; none for one process) turns the verdicts into one, so all
// choose the same checkpoint while each file is read once.
ResumePoint choose_resume_checkpoint(const std::filesystem::path& run_dir, FileShare share = {},
                                     const std::function<bool(bool)>& all_agree = nullptr);

// The checkpoint --checkpoint names for reading its weights (generate, eval, convert --to-hf): the
// folder itself when it holds state.json; in a run folder ckpt-latest's, or, when that is missing,
// dangling or damaged, the newest ckpt-<step> folder whose state.json and weight files are complete
// (their sizes; the CRC-32 is checked as the weights are read), as --resume falls back. `notice`
// names what was skipped (empty when nothing was). Throws naming the path when there is none.
struct CheckpointToRead {
  std::filesystem::path checkpoint;
  std::string notice;
};
CheckpointToRead find_checkpoint_to_read(const std::filesystem::path& path);
// For a command's --checkpoint: find_checkpoint_to_read's folder, its notice printed on stderr; an
// empty path (no --checkpoint) stays empty.
std::string checkpoint_noting(const std::string& path);

// What remove_unfinished_saves removed.
struct RemovedSaves {
  int64_t folders = 0;
  uint64_t bytes = 0;
};
// Removes the temporary folders of saves that never committed (".ckpt-<8+ digits>.tmp", left by a
// run killed while it saved), and nothing else; a new or resumed run calls it (one process) before
// its first save.
RemovedSaves remove_unfinished_saves(const std::filesystem::path& run_dir);

inline constexpr const char* kRunFolderLock = ".tessera-lock";

// An exclusive lock on a run folder (flock on <run_dir>/.tessera-lock, which records the holder's pid
// and host), held while a run trains into it: two runs in one folder would interleave their metrics,
// remove each other's unfinished saves and prune each other's checkpoints. The system releases it
// when the process ends, however it ends, so a killed run never leaves the folder locked; a run that
// ends removes the file (and the folder, when the lock made it and it is still empty), so a refused or
// failed run leaves the folder as it found it. The lock
// is the process's: a second RunFolderLock on a folder this process holds shares it.
class RunFolderLock {
 public:
  // Creates the folder if need be and takes the lock; throws naming the holder when another process
  // has it. Where the file system cannot lock (no flock support) the folder stays unlocked, silently.
  explicit RunFolderLock(const std::filesystem::path& run_dir);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  std::pair<dev_t, ino_t> key_;  // the folder's device and inode
  std::filesystem::path file_;    // its lock file
};

}  // namespace tessera
