// The console's live progress line: step/steps, loss, tokens/s and ETA, redrawn in place on a
// terminal and printed every few seconds otherwise (logs stay readable; also in a job of several ranks,
// whose stdout mpirun makes a terminal whatever its own output is). Its tok/s is metrics.jsonl's
// tokens_per_s (the global batch's tokens, every rank's) over the steps since the line before: their
// tokens over the seconds they took, so a log line every 5 s is not one step's noise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera {

// A remaining time as mm:ss, h:mm:ss or days and hours ("3d04h"); ">99d" beyond.
std::string eta_text(double seconds);

class ProgressLine {
 public:
  ProgressLine(int64_t total_steps, bool quiet);
  // `tokens_per_s`: this step's (metrics.jsonl's).
  void update(int64_t step, float loss, float lr, double tokens_per_s, double elapsed_s);
  // Prints a message on its own line without garbling the live line.
  void message(const std::string& text);
  void finish();

 private:
  int64_t total_;
  bool quiet_;
  bool tty_;
  bool line_open_ = false;
  double last_print_s_ = -1e9;
  int64_t first_step_ = -1;
  double inverse_rates_ = 0;     // the sum of 1 / tokens_per_s over the steps not yet printed
  int64_t unprinted_steps_ = 0;
  double first_elapsed_ = 0;
};

}  // namespace tessera
