// Locking a run folder for every rank of a job (run_lock.h).
#include "train/run_lock.h"

#include <exception>

#include "core/error.h"
#include "core/user_text.h"
#include "parallel/group_sum.h"

namespace tessera {

void lock_run_folder(std::optional<RunFolderLock>& lock, const std::filesystem::path& out_dir, Comm& world) {
  std::exception_ptr error;
  if (world.rank() == 0) {
    try {
      lock.emplace(out_dir);
    } catch (const Error&) {
      error = std::current_exception();
    }
  }
  const double refused = sum_over(world, {error ? 1.0 : 0.0})[0];
  if (error) std::rethrow_exception(error);
  if (refused > 0) throw QuietError("--out-dir " + quoted_text(out_dir.string()) + ": rank 0 cannot lock it", __FILE__);
}

}  // namespace tessera
