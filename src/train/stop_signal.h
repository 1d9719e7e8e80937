// Preemption: SIGTERM (what Slurm and cloud schedulers send before taking the machine), SIGINT
// (Ctrl-C) and SIGUSR1 (Slurm's --signal=USR1@T warning, and the one mpirun and srun pass on to every
// rank without killing it) ask the run to stop at the next step boundary, save a checkpoint and exit
// 0. A second SIGTERM or SIGINT ends the process at once (exit 128 + signal), for a user who does not
// want to wait, unless it comes within kRepeatWindowS of the first: launchers deliver one request by
// several paths (Slurm signals every task and srun, which forwards it), and a save must not be lost
// to an echo. SIGUSR1 is always such an echo (schedulers and `tessera launch` send it).
#pragma once

#include <array>
#include <csignal>

namespace tessera {

// Stands for a signal another rank received (this one got none).
inline constexpr int kSignalElsewhere = -1;

// The signals that ask a run to save and stop.
inline constexpr std::array<int, 3> kStopSignals = {SIGTERM, SIGINT, SIGUSR1};
// A second SIGTERM/SIGINT sooner than this after the first repeats the same request.
inline constexpr double kRepeatWindowS = 2.0;

class StopSignals {
 public:
  // Installs the handlers for the object's lifetime (one object at a time); the previous ones come back after.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal received (one of kStopSignals), or 0.
  int received() const;
  // "SIGTERM" / "SIGINT" / "SIGUSR1" ("a stop signal" for kSignalElsewhere).
  static const char* name(int signal);
};

}  // namespace tessera
