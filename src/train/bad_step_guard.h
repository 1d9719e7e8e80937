// Bad steps: a step whose loss or gradient norm is not finite, or (with a spike threshold) an
// outlier against the recent accepted steps, is skipped instead of applied: none of it reaches the
// weights or the optimizer moments. The run stops only after max_bad_steps skipped in a row.
// Spikes follow llm.c's rule: z = (x - mean) / std over a window of recent accepted values, and x is
// an outlier when z > the threshold (only upward; judged once the window holds kMinSamples values).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace tessera {

class BadStepGuard {
 public:
  static constexpr size_t kWindow = 128, kMinSamples = 16;

  // spike_zscore 0: only non-finite values count as bad.
  BadStepGuard(int64_t max_bad_steps, double spike_zscore);

  // Why this step must be skipped ("loss is nan", "grad norm spike: z 9.1 > 6"), or nothing.
  std::optional<std::string> judge(double loss, double grad_norm) const;
  // Records a skipped step; true when it makes max_bad_steps in a row (the run must stop).
  bool skipped();
  // Records an applied step: its values join the windows and the run of skips ends.
  void applied(double loss, double grad_norm);

  int64_t in_a_row() const { return in_a_row_; }
  int64_t total_skipped() const { return total_; }
  int64_t max_bad_steps() const { return max_bad_steps_; }

 private:
  struct Window {
    std::deque<double> values;
    std::optional<double> zscore(double x) const;  // none until kMinSamples values
    void add(double x);
  };
  int64_t max_bad_steps_;
  double spike_zscore_;
  Window losses_, norms_;
  int64_t in_a_row_ = 0, total_ = 0;
};

}  // namespace tessera
