// The run folder's lock for a whole job: rank 0 takes it (checkpoint/run_folder.h's RunFolderLock)
// before any rank reads the folder, so a second run into a folder in use is refused at once, naming
// the first, and never reads a checkpoint the first is writing or pruning meanwhile.
#pragma once

#include <filesystem>
#include <optional>

#include "checkpoint/run_folder.h"
#include "parallel/comm.h"

namespace tessera {

// Collective over `world`: rank 0's lock on `out_dir` emplaced in `lock`, or every rank throws (rank 0
// the lock's error naming the holder, the others quietly).
void lock_run_folder(std::optional<RunFolderLock>& lock, const std::filesystem::path& out_dir, Comm& world);

}  // namespace tessera
