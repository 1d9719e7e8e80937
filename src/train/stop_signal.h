// Preemption: SIGTERM (what Slurm and cloud schedulers send before taking the machine), SIGINT
// (Ctrl-C) and SIGUSR1 (Slurm's --signal=USR1@T warning, and the one mpirun and srun pass on to every
// rank without killing it) ask the run to stop at the next step boundary, save a checkpoint and exit
// 0. A second SIGTERM or SIGINT ends the process at once (exit 128 + signal), for a user who does not
// want to wait, unless it comes within kRepeatWindowS of the first: launchers deliver one request by
// several paths (Slurm signals every task and srun, which forwards it), and a save must not be lost
// to an echo. SIGUSR1 is always such an echo (schedulers and `tessera launch` send it).
//
// `tessera train` installs the handlers first thing, so that a request during set-up (MPI's start,
// reading a large --init-from or checkpoint, the data scan) is kept too: the set-up checks for it
// between its phases (StoppedDuringSetup) and the run ends before its first step, with nothing to save.
#pragma once

#include <array>
#include <csignal>

#include "core/error.h"

namespace tessera {

// The signals that ask a run to save and stop.
inline constexpr std::array<int, 3> kStopSignals = {SIGTERM, SIGINT, SIGUSR1};
// A second SIGTERM/SIGINT sooner than this after the first repeats the same request.
inline constexpr double kRepeatWindowS = 2.0;

class StopSignals {
 public:
  // Installs the handlers for the object's lifetime; the previous ones come back after. Objects
  // nest (set-up's around the training loop's): an inner one shares the outer one's handlers and the
  // request received so far; only the outermost installs, clears the request and restores.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal received (one of kStopSignals), or 0.
  int received() const { return pending(); }
  // The signal received while some StopSignals object is alive, or 0 (also when none is).
  static int pending();
  // Whether the first request is acknowledged on stderr the moment it arrives (a step can take
  // minutes; the stop itself is reported when it happens). Off by default; one rank of a job says it.
  static void acknowledge_on_stderr(bool on);
  // "SIGTERM" / "SIGINT" / "SIGUSR1" ("a stop signal" for another number).
  static const char* name(int signal);
};

// A rank's stop request as one count per kStopSignals entry (1 for the signal it received, else 0),
// to be summed over the ranks with the step's other values: ranks receive a job's request at slightly
// different moments, and the sums let every rank stop after the same step and name the signal.
std::array<double, kStopSignals.size()> stop_votes(int signal);
// The signal most ranks received, from the summed votes (ties go to the earlier in kStopSignals), or
// 0 when none did.
int stop_vote_result(const double* summed_votes);

// Thrown by every rank alike when a stop request came during the run's set-up (the ranks agreed on
// it): nothing was trained, so there is nothing to save. `tessera train` says so and exits 0.
class StoppedDuringSetup : public Error {
 public:
  StoppedDuringSetup(int signal, std::string where)
      : Error(std::string(StopSignals::name(signal)) + " during set-up", std::move(where)), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace tessera
