// The signal handlers only store the signal number (async-signal-safe); the training loop polls it.
#include "train/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace tessera {
namespace {

std::atomic<int> g_received{0};
struct sigaction g_previous_term, g_previous_int;

void on_signal(int signal) {
  int expected = 0;
  if (!g_received.compare_exchange_strong(expected, signal)) _exit(128 + signal);  // the second one
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGINT, &action, &g_previous_int);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
}

int StopSignals::received() const { return g_received.load(); }

const char* StopSignals::name(int signal) {
  return signal == SIGTERM ? "SIGTERM" : signal == SIGINT ? "SIGINT" : "a stop signal";
}

}  // namespace tessera
