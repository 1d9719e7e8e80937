// Live progress line.
#include "train/progress.h"

#include <cstdio>
#include <unistd.h>

namespace tessera {

ProgressLine::ProgressLine(int64_t total_steps, bool quiet)
    : total_(total_steps), quiet_(quiet), tty_(isatty(fileno(stdout)) != 0) {}

void ProgressLine::update(int64_t step, float loss, float lr, double tokens_per_s, double elapsed_s) {
  if (quiet_) return;
  if (first_step_ < 0) {
    first_step_ = step;
    first_elapsed_ = elapsed_s;
  }
  bool last = step == total_;
  if (!tty_ && !last && elapsed_s - last_print_s_ < 5.0) return;
  last_print_s_ = elapsed_s;
  double per_step = step > first_step_ ? (elapsed_s - first_elapsed_) / double(step - first_step_) : 0.0;
  double eta = per_step * double(total_ - step);
  std::printf("%sstep %5lld/%lld | loss %.4f | lr %.2e | %8.0f tok/s | eta %02d:%02d%s", tty_ ? "\r\033[K" : "",
              (long long)step, (long long)total_, double(loss), double(lr), tokens_per_s, int(eta) / 60,
              int(eta) % 60, tty_ ? "" : "\n");
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
