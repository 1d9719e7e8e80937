// `tessera launch --max-restarts N -- <command>`: runs a training job (typically `mpirun ...
// tessera train ... --resume` or `srun ...`) and runs it again after a failure, so a rank that dies
// costs only the steps since the last checkpoint: the restarted job resumes from it. A job that
// exits 0 ends the supervision, and so does one whose command line was refused (a restart would be
// refused alike). A stop signal to the supervisor (SIGTERM, SIGINT, SIGUSR1) ends the supervision:
// the first reaches the job as SIGUSR1, which tessera train takes as "save and stop" and which
// mpirun and srun pass to every rank without killing it (mpirun kills its ranks a second after
// passing on SIGTERM, before a large checkpoint is written); a second one reaches it as SIGTERM. The
// request is passed on again while the job runs (2 s after, then at doubling intervals up to a
// minute), since a launcher still starting its ranks passes it to none of them.
// A failed job's processes that outlive it (MPI ranks whose mpirun was killed, anything left in its
// process group) are ended (SIGKILL) before the restart, so that none holds the run folder's lock or
// writes into it beside the restarted job.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tessera {

struct RestartPolicy {
  int max_restarts = 3;
  double delay_s = 5.0;   // between a failure and the restart
  double window_s = 0.0;  // > 0: only the failures of the last window_s seconds count against max_restarts
};

// Whether a job's exit code says its command line was refused, so that a restart cannot help:
// 2 and 100-114 (tessera's refusals of a flag or its value, as CLI11 numbers them), 126 and 127 (the
// command cannot be run or is not found).
bool command_line_refused(int exit_code);

// Runs `command` (argv, looked up on PATH) until it exits 0, its command line is refused, a signal
// to the supervisor ends it, or max_restarts restarts have failed too (within window_s seconds, when
// it is set: a job of weeks survives a failure a day, and still gives up on one that keeps failing
// at once); returns the last exit code
// (128 + signal for a job killed by one). `log` receives one line per event (start, failure with how
// long the job ran, processes it left running and were ended, restart, a signal passed on). Makes
// the calling process the subreaper of its descendants while it runs.
int run_with_restarts(const std::vector<std::string>& command, const RestartPolicy& policy,
                      const std::function<void(const std::string&)>& log);

}  // namespace tessera
