// The signal handlers only store the signal number (async-signal-safe); the training loop polls it.
#include "train/stop_signal.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace tessera {
namespace {

std::atomic<int> g_received{0};
std::atomic<int64_t> g_first_ns{0};  // when the first one came (CLOCK_MONOTONIC)
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
    return;
  }
  const bool echo = signal == SIGUSR1 || double(now_ns() - g_first_ns.load()) < kRepeatWindowS * 1e9;
  if (!echo) _exit(128 + signal);  // a second request: the user does not want to wait
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (int signal : kStopSignals) sigaddset(&action.sa_mask, signal);  // one handler at a time
  for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &action, &g_previous[i]);
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < kStopSignals.size(); ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

int StopSignals::received() const { return g_received.load(); }

const char* StopSignals::name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a stop signal";
  }
}

}  // namespace tessera
