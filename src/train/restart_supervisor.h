// `tessera launch --max-restarts N -- <command>`: runs a training job (typically `mpirun ...
// tessera train ... --resume` or `srun ...`) and runs it again after a failure, so a rank that dies
// costs only the steps since the last checkpoint: the restarted job resumes from it. A job that
// exits 0 ends the supervision; SIGTERM/SIGINT to the supervisor are passed to the job (which saves
// and exits 0 on its own) and never restart it.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tessera {

struct RestartPolicy {
  int max_restarts = 3;
  double delay_s = 5.0;  // between a failure and the restart
};

// Runs `command` (argv, looked up on PATH) until it exits 0, a signal to the supervisor ends it, or
// max_restarts restarts have failed too; returns the last exit code (128 + signal for a job killed
// by one). `log` receives one line per event (start, failure, restart).
int run_with_restarts(const std::vector<std::string>& command, const RestartPolicy& policy,
                      const std::function<void(const std::string&)>& log);

}  // namespace tessera
