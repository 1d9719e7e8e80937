// fork/exec/wait with signal forwarding. The job runs in its own process group so that a terminal's
// Ctrl-C reaches it only through the supervisor, which forwards the signal once and stops restarting.
#include "train/restart_supervisor.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace tessera {
namespace {

std::atomic<pid_t> g_job{0};
std::atomic<int> g_signal{0};

void forward(int signal) {
  g_signal = signal;
  const pid_t job = g_job.load();
  if (job > 0) ::kill(-job, signal);  // the job's whole process group
}

// Starts `command` in a new process group; returns its pid.
pid_t start(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  TS_CHECK(pid >= 0, "launch: cannot start a process (", std::strerror(errno), ")");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "tessera launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    TS_CHECK(errno == EINTR, "launch: waiting for the job failed (", std::strerror(errno), ")");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int run_with_restarts(const std::vector<std::string>& command, const RestartPolicy& policy,
                      const std::function<void(const std::string&)>& log) {
  TS_CHECK(!command.empty(), "launch: give the command to run after --, e.g. tessera launch -- mpirun -np 8 ...");
  TS_CHECK(policy.max_restarts >= 0, "--max-restarts must not be negative, got ", policy.max_restarts);
  struct sigaction action {}, old_term {}, old_int {};
  action.sa_handler = forward;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &old_term);
  sigaction(SIGINT, &action, &old_int);
  g_signal = 0;
  int code = 0;
  for (int attempt = 0;; ++attempt) {
    log(attempt == 0 ? "starting the job" : "restart " + std::to_string(attempt) + " of " +
                                               std::to_string(policy.max_restarts));
    g_job = start(command);
    code = wait_for(g_job);
    g_job = 0;
    if (code == 0 || g_signal != 0) break;
    if (attempt == policy.max_restarts) {
      log("the job failed (exit " + std::to_string(code) + ") and no restarts are left");
      break;
    }
    log("the job failed (exit " + std::to_string(code) + "); restarting in " + std::to_string(int(policy.delay_s)) +
        " s from its latest checkpoint");
    std::this_thread::sleep_for(std::chrono::duration<double>(policy.delay_s));
    if (g_signal != 0) break;
  }
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  return code;
}

}  // namespace tessera
