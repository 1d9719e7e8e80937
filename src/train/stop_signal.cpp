// The signal handlers only store the signal number (async-signal-safe) and, on the first, may say so
// with write(2); the training loop and the set-up poll it.
#include "train/stop_signal.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace tessera {
namespace {

std::atomic<int> g_received{0};
std::atomic<int64_t> g_first_ns{0};  // when the first one came (CLOCK_MONOTONIC)
int g_depth = 0;                     // StopSignals objects alive (set up and torn down by one thread)
std::atomic<bool> g_acknowledge{false};
bool g_on_terminal = false;  // stderr is a terminal: the acknowledgement starts a line of its own

// What the first request writes at once (write(2) is async-signal-safe; these are built beforehand).
constexpr std::string_view kAcknowledgement =
    " received: finishing the current step (or set-up phase), then saving and stopping; a second "
    "Ctrl-C or SIGTERM ends it at once, without saving\n";

void acknowledge(int signal) {
  const char* name = StopSignals::name(signal);
  size_t length = 0;
  while (name[length] != 0) ++length;
  if (g_on_terminal) (void)!write(STDERR_FILENO, "\n", 1);
  (void)!write(STDERR_FILENO, "tessera: ", 9);
  (void)!write(STDERR_FILENO, name, length);
  (void)!write(STDERR_FILENO, kAcknowledgement.data(), kAcknowledgement.size());
}
std::array<struct sigaction, kStopSignals.size()> g_previous;

// clock_gettime is async-signal-safe.
int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void on_signal(int signal) {
  int expected = 0;
  if (g_received.compare_exchange_strong(expected, signal)) {
    g_first_ns = now_ns();
    if (g_acknowledge) acknowledge(signal);
    return;
  }
  const bool echo = signal == SIGUSR1 || double(now_ns() - g_first_ns.load()) < kRepeatWindowS * 1e9;
  if (!echo) _exit(128 + signal);  // a second request: the user does not want to wait
}

}  // namespace

StopSignals::StopSignals() {
  if (g_depth++ > 0) return;  // nested: the outer object's handlers and request stand
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (int signal : kStopSignals) sigaddset(&action.sa_mask, signal);  // one handler at a time
  for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &action, &g_previous[i]);
}

StopSignals::~StopSignals() {
  if (--g_depth > 0) return;
  for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

void StopSignals::acknowledge_on_stderr(bool on) {
  g_on_terminal = isatty(STDERR_FILENO) != 0;
  g_acknowledge = on;
}

int StopSignals::pending() { return g_depth > 0 ? g_received.load() : 0; }

std::array<double, kStopSignals.size()> stop_votes(int signal) {
  std::array<double, kStopSignals.size()> votes{};
  for (size_t i = 0; i < kStopSignals.size(); ++i) votes[i] = kStopSignals[i] == signal ? 1.0 : 0.0;
  return votes;
}

int stop_vote_result(const double* summed_votes) {
  const double* most = std::max_element(summed_votes, summed_votes + kStopSignals.size());
  return *most > 0.5 ? kStopSignals[size_t(most - summed_votes)] : 0;
}

const char* StopSignals::name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a stop signal";
  }
}

}  // namespace tessera
