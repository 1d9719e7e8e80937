// Preemption: SIGTERM (what Slurm and cloud schedulers send before taking the machine) and SIGINT
// (Ctrl-C) ask the run to stop at the next step boundary, save a checkpoint and exit 0. A second
// signal ends the process at once (exit 128 + signal), for a user who does not want to wait.
#pragma once

namespace tessera {

// Stands for a signal another rank received (this one got none).
inline constexpr int kSignalElsewhere = -1;

class StopSignals {
 public:
  // Installs the handlers for the object's lifetime (one object at a time); the previous ones come back after.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal received (SIGTERM or SIGINT), or 0.
  int received() const;
  // "SIGTERM" / "SIGINT" ("a stop signal" for kSignalElsewhere).
  static const char* name(int signal);
};

}  // namespace tessera
