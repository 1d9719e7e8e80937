// fork/exec/wait with signal forwarding. The job runs in its own process group so that a terminal's
// Ctrl-C reaches it only through the supervisor. The stop signals are blocked from before the fork
// until the job's pid is known, so one that arrives meanwhile is passed on, not lost.
#include "train/restart_supervisor.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "train/stop_signal.h"

namespace tessera {
namespace {

std::atomic<pid_t> g_job{0};
std::atomic<int> g_requests{0};  // stop signals received
std::atomic<int> g_first{0};     // the first of them

// The n-th request (1-based) as the job receives it: first a request to save and stop, then to end.
int job_signal(int n) { return n == 1 ? SIGUSR1 : SIGTERM; }

void forward(int signal) {
  int none = 0;
  g_first.compare_exchange_strong(none, signal);
  const int n = ++g_requests;
  const pid_t job = g_job.load();
  if (job > 0) ::kill(-job, job_signal(n));  // the job's whole process group
}

// Blocks the forwarded signals; returns the mask before, to restore.
sigset_t block_forwarded() {
  sigset_t set, old;
  sigemptyset(&set);
  for (int s : kStopSignals) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, &old);
  return old;
}

// Starts `command` in a new process group and publishes its pid to the handler; returns it.
pid_t start(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const sigset_t old = block_forwarded();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    for (int s : kStopSignals) ::signal(s, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "tessera launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  const int fork_errno = errno;
  if (pid > 0) {
    ::setpgid(pid, pid);
    g_job = pid;
    // A request that came before the job existed reaches it now, as it would have.
    if (const int n = g_requests.load(); n > 0) ::kill(-pid, job_signal(n));
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);
  TS_CHECK(pid > 0, "launch: cannot start a process (", std::strerror(fork_errno), ")");
  return pid;
}

// Waits for the job; logs each stop request as it is passed on.
int wait_for(pid_t pid, const std::function<void(const std::string&)>& log) {
  int status = 0, logged = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    TS_CHECK(errno == EINTR, "launch: waiting for the job failed (", std::strerror(errno), ")");
    for (const int n = g_requests.load(); logged < n; ++logged)
      log(logged == 0 ? std::string(StopSignals::name(g_first.load())) +
                            ": asked the job to save a checkpoint and stop (SIGUSR1); a second signal ends it (SIGTERM)"
                      : "a second signal: ending the job (SIGTERM)");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Sleeps `seconds`, or less when a stop request comes.
void sleep_unless_stopped(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (g_requests == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

}  // namespace

bool command_line_refused(int exit_code) {
  return exit_code == 2 || (exit_code >= 100 && exit_code <= 114) || exit_code == 126 || exit_code == 127;
}

int run_with_restarts(const std::vector<std::string>& command, const RestartPolicy& policy,
                      const std::function<void(const std::string&)>& log) {
  TS_CHECK(!command.empty(), "launch: give the command to run after --, e.g. tessera launch -- mpirun -np 8 ...");
  TS_CHECK(policy.max_restarts >= 0, "--max-restarts must not be negative, got ", policy.max_restarts);
  struct sigaction action {};
  action.sa_handler = forward;  // no SA_RESTART: waitpid returns EINTR, so the request is logged
  sigemptyset(&action.sa_mask);
  std::array<struct sigaction, kStopSignals.size()> previous;
  for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &action, &previous[i]);
  g_requests = 0;
  g_first = 0;
  int code = 0;
  for (int attempt = 0;; ++attempt) {
    log(attempt == 0 ? "starting the job" : "restart " + std::to_string(attempt) + " of " +
                                               std::to_string(policy.max_restarts));
    const pid_t job = start(command);
    code = wait_for(job, log);
    g_job = 0;
    const std::string failed = "the job failed (exit " + std::to_string(code) + ")";
    if (code == 0 || g_requests != 0) break;
    if (command_line_refused(code)) {
      log(failed + ": its command line was refused or cannot run, and would be again; not restarting");
      break;
    }
    if (attempt == policy.max_restarts) {
      log(failed + " and no restarts are left");
      break;
    }
    log(failed + "; restarting in " + std::to_string(int(policy.delay_s)) + " s from its latest checkpoint");
    sleep_unless_stopped(policy.delay_s);
    if (g_requests != 0) {
      log(std::string(StopSignals::name(g_first.load())) + " before the restart: not restarting");
      break;
    }
  }
  for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &previous[i], nullptr);
  return code;
}

}  // namespace tessera
