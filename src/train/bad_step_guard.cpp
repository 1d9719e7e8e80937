// Non-finite and outlier steps, counted.
#include "train/bad_step_guard.h"

#include <cmath>
#include <cstdio>
#include <tuple>

#include "core/user_text.h"

namespace tessera {

BadStepGuard::BadStepGuard(int64_t max_bad_steps, double spike_zscore)
    : max_bad_steps_(max_bad_steps), spike_zscore_(spike_zscore) {}

std::optional<double> BadStepGuard::Window::zscore(double x) const {
  if (values.size() < kMinSamples) return std::nullopt;
  double mean = 0.0, square = 0.0;
  for (double v : values) mean += v;
  mean /= double(values.size());
  for (double v : values) square += (v - mean) * (v - mean);
  const double std = std::sqrt(square / double(values.size()));
  if (std == 0.0) return std::nullopt;
  return (x - mean) / std;
}

void BadStepGuard::Window::add(double x) {
  values.push_back(x);
  if (values.size() > kWindow) values.pop_front();
}

std::optional<std::string> BadStepGuard::judge(double loss, double grad_norm) const {
  if (!std::isfinite(loss)) return "loss is " + number_text(loss);
  if (!std::isfinite(grad_norm)) return "gradient norm is " + number_text(grad_norm);
  if (spike_zscore_ <= 0.0) return std::nullopt;
  char reason[96];
  for (auto [what, window, x] : {std::tuple{"loss", &losses_, loss}, {"gradient norm", &norms_, grad_norm}}) {
    const std::optional<double> z = window->zscore(x);
    if (!z || *z <= spike_zscore_) continue;
    std::snprintf(reason, sizeof reason, "%s spike: z %.1f above --spike-zscore %g", what, *z, spike_zscore_);
    return std::string(reason);
  }
  return std::nullopt;
}

bool BadStepGuard::skipped() {
  ++total_;
  return ++in_a_row_ >= max_bad_steps_;
}

void BadStepGuard::applied(double loss, double grad_norm) {
  in_a_row_ = 0;
  losses_.add(loss);
  norms_.add(grad_norm);
}

}  // namespace tessera
