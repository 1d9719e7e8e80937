// RunRefused: the run's configuration refused at start-up, and the helpers that raise it. Kept apart
// from the errors that come later because `tessera train` exits 2 for it (as for a bad flag) and
// `tessera launch` therefore never restarts such a job.
#pragma once

#include "core/error.h"

namespace tessera {

// The run's configuration refused at start-up: its flags and files against each other, the model and
// the world (bad values, a layout the world or the model does not allow, ranks started with different
// configurations, a --steps below the resumed step). The same command would be refused again, so
// `tessera train` exits 2 for it, as for a bad flag, and `tessera launch` does not restart the job.
class RunRefused : public Error {
 public:
  using Error::Error;
};

// TS_CHECK for a refusal: throws RunRefused built from the streamed parts when cond is false.
#define TS_REFUSE_UNLESS(cond, ...)                                                                      \
  do {                                                                                                   \
    if (!(cond)) ::tessera::detail::throw_error_as<::tessera::RunRefused>(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// Runs `check`; a tessera::Error it throws is rethrown as RunRefused, except a RunRefused already and
// a StorageError (a read the storage failed, which a restart may get past).
template <typename F>
auto refuse_on_error(F check) -> decltype(check()) {
  try {
    return check();
  } catch (const RunRefused&) {
    throw;
  } catch (const StorageError&) {
    throw;
  } catch (const Error& e) {
    throw RunRefused(e.what(), e.where());
  }
}

}  // namespace tessera
