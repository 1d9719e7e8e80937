// fork/exec/wait with signal forwarding. The job runs in its own process group so that a terminal's
// Ctrl-C reaches it only through the supervisor. The stop signals are blocked from before the fork
// until the job's pid is known, so one that arrives meanwhile is passed on, not lost. The supervisor
// is the job's subreaper (Linux): a process of the job whose parent ended (an MPI rank whose mpirun
// was killed) becomes its child, so that it can end what a failed job left running before a restart.
#include "train/restart_supervisor.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/user_text.h"
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

// Waits for the job; logs each stop request as it is passed on. Other children (the job's processes
// whose parents ended, given to the subreaper) are reaped as they end, so none stays a zombie. Once a
// request was passed on, it is passed on again while the job runs, 2 s after it and then at doubling
// intervals up to a minute: a launcher may drop a signal that comes before its ranks exist (mpirun
// forwards it to none while it starts them), and tessera train takes a repeated SIGUSR1 as the same
// request.
int wait_for(pid_t pid, const std::function<void(const std::string&)>& log) {
  using Clock = std::chrono::steady_clock;
  int status = 0, logged = 0;
  Clock::time_point next_resend;
  double interval_s = 2.0;
  const auto resend_in = [&](double seconds) {
    interval_s = seconds;
    next_resend = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  // Logs the requests passed on since the last call; true when there were any.
  const auto log_requests = [&](int requests) {
    const bool any = logged < requests;
    for (; logged < requests; ++logged)
      log(logged == 0 ? std::string(StopSignals::name(g_first.load())) +
                            ": asked the job to save a checkpoint and stop (SIGUSR1); a second signal ends it (SIGTERM)"
                      : "a second signal: ending the job (SIGTERM)");
    return any;
  };
  for (;;) {
    const int requests = g_requests.load();
    const pid_t ended = ::waitpid(-1, &status, requests > 0 ? WNOHANG : 0);
    if (ended == pid) break;
    if (ended > 0) continue;
    TS_CHECK(ended == 0 || errno == EINTR, "launch: waiting for the job failed (", std::strerror(errno), ")");
    if (log_requests(requests)) resend_in(2.0);
    if (requests == 0) continue;
    if (Clock::now() >= next_resend) {
      ::kill(-pid, job_signal(requests));
      resend_in(std::min(interval_s * 2, 60.0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  log_requests(g_requests.load());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The live processes whose parent is this process or whose process group is `group` (from /proc:
// each /proc/<pid>/stat's state, parent and group, after the command's ')'); zombies are left out.
std::set<pid_t> job_processes(pid_t group) {
  std::set<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long parent = 0, pgrp = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %ld %ld", &state, &parent, &pgrp) != 3 || state == 'Z') continue;
    if (parent == long(::getpid()) || pgrp == long(group)) found.insert(pid_t(std::stol(name)));
  }
  return found;
}

// Ends (SIGKILL) and reaps what the ended job left running: what stays in its process group, and its
// processes outside it (MPI ranks run in groups of their own) whose parent ended, which the subreaper
// inherited; their own children follow as they are handed on. Returns the pids ended, and those
// that outlived 30 s (a process in uninterruptible I/O ends only when its I/O does).
struct Leftovers {
  std::set<pid_t> ended, alive;
};
Leftovers end_leftovers(pid_t job_group) {
  Leftovers l;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    l.alive = job_processes(job_group);
    if (l.alive.empty() || std::chrono::steady_clock::now() > until) break;
    for (const pid_t pid : l.alive)
      if (::kill(pid, SIGKILL) == 0) l.ended.insert(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const pid_t pid : l.alive) l.ended.erase(pid);
  return l;
}

// "4 min 12 s", "2 h 13 min", "3.2 s".
std::string duration_text(double seconds) {
  if (seconds < 60) return number_text(double(int64_t(seconds * 10)) / 10) + " s";
  const int64_t s = int64_t(seconds);
  if (s < 3600) return std::to_string(s / 60) + " min " + std::to_string(s % 60) + " s";
  return std::to_string(s / 3600) + " h " + std::to_string(s % 3600 / 60) + " min";
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
  int subreaper = 0;
  ::prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  int code = 0;
  using Clock = std::chrono::steady_clock;
  std::deque<Clock::time_point> failures;  // the failures that count against max_restarts
  const std::string window = policy.window_s > 0 ? " in the last " + duration_text(policy.window_s) : "";
  for (int attempt = 0;; ++attempt) {
    log(attempt == 0 ? "starting the job" : "restart " + std::to_string(failures.size()) + " of " +
                                               std::to_string(policy.max_restarts) + window);
    const auto started = Clock::now();
    const pid_t job = start(command);
    code = wait_for(job, log);
    g_job = 0;
    const double ran_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (code != 0) {
      // A failed job's processes must not outlive it into the restart, where they would hold the run
      // folder's lock (the restart refused) or go on writing into it.
      const Leftovers left = end_leftovers(job);
      const auto listed = [](const std::set<pid_t>& pids) {
        std::string text = std::to_string(pids.size()) + " process" + (pids.size() == 1 ? " (pid " : "es (pids ");
        for (const pid_t pid : pids) text += std::to_string(pid) + (pid == *pids.rbegin() ? ")" : ", ");
        return text;
      };
      if (!left.ended.empty()) log("ended " + listed(left.ended) + " that the job left running");
      if (!left.alive.empty()) log(listed(left.alive) + " of the job still running 30 s after SIGKILL; going on");
    }
    const std::string failed = "the job failed (exit " + std::to_string(code) + ") after " + duration_text(ran_s);
    if (code == 0 || g_requests != 0) break;
    if (command_line_refused(code)) {
      log(failed + ": its command line was refused or cannot run, and would be again; not restarting");
      break;
    }
    failures.push_back(Clock::now());
    while (policy.window_s > 0 &&
           std::chrono::duration<double>(failures.back() - failures.front()).count() > policy.window_s)
      failures.pop_front();
    if (int(failures.size()) > policy.max_restarts) {
      log(failed + " and no restarts are left" + (window.empty() ? "" : " (" + std::to_string(failures.size()) +
                                                                          " failures" + window + ")"));
      break;
    }
    log(failed + "; restarting in " + number_text(policy.delay_s) + " s from its latest checkpoint");
    sleep_unless_stopped(policy.delay_s);
    if (g_requests != 0) {
      log(std::string(StopSignals::name(g_first.load())) + " before the restart: not restarting");
      break;
    }
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, subreaper);
  for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &previous[i], nullptr);
  return code;
}

}  // namespace tessera
