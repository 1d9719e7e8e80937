// Live progress line.
#include "train/progress.h"

#include <cstdio>
#include <unistd.h>

#include "parallel/runtime.h"

namespace tessera {

std::string eta_text(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // NaN too
  if (seconds >= 100.0 * 86400) return ">99d";
  const auto whole = static_cast<long long>(seconds + 0.5);
  char text[32];
  const long long days = whole / 86400, hours = whole / 3600 % 24, minutes = whole / 60 % 60, secs = whole % 60;
  if (days > 0) std::snprintf(text, sizeof text, "%lldd%02lldh", days, hours);
  else if (hours > 0) std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", hours, minutes, secs);
  else std::snprintf(text, sizeof text, "%02lld:%02lld", minutes, secs);
  return text;
}

// Under mpirun a rank's stdout is a pseudo-terminal of mpirun's whatever mpirun's own output is (a
// job's log file, mostly): such a run prints lines, as to a file, not redraws that a log would keep
// as one endless line of escape codes.
ProgressLine::ProgressLine(int64_t total_steps, bool quiet)
    : total_(total_steps), quiet_(quiet), tty_(isatty(fileno(stdout)) != 0 && launcher_place().size == 1) {}

void ProgressLine::update(int64_t step, float loss, float lr, double tokens_per_s, double elapsed_s) {
  if (quiet_) return;
  if (first_step_ < 0) {
    first_step_ = step;
    first_elapsed_ = elapsed_s;
  }
  // The steps' own rate since the last line: their tokens over their seconds. A step's tokens are
  // the same every step, so that is the harmonic mean of the steps' rates.
  inverse_rates_ += 1.0 / tokens_per_s;
  ++unprinted_steps_;
  bool last = step == total_;
  if (!tty_ && !last && elapsed_s - last_print_s_ < 5.0) return;
  last_print_s_ = elapsed_s;
  tokens_per_s = double(unprinted_steps_) / inverse_rates_;
  inverse_rates_ = 0;
  unprinted_steps_ = 0;
  double per_step = step > first_step_ ? (elapsed_s - first_elapsed_) / double(step - first_step_) : 0.0;
  double eta = per_step * double(total_ - step);
  std::printf("%sstep %5lld/%lld | loss %.4f | lr %.2e | %8.0f tok/s | eta %s%s", tty_ ? "\r\033[K" : "",
              (long long)step, (long long)total_, double(loss), double(lr), tokens_per_s, eta_text(eta).c_str(),
              tty_ ? "" : "\n");
  std::fflush(stdout);
  line_open_ = tty_;
}

void ProgressLine::message(const std::string& text) {
  if (line_open_) std::printf("\n");
  line_open_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void ProgressLine::finish() {
  if (line_open_) std::printf("\n");
  line_open_ = false;
  std::fflush(stdout);
}

}  // namespace tessera
