// Exact-enough sums of reported values over a group (group_sum.h).
#include "parallel/group_sum.h"

namespace tessera {

std::vector<double> sum_over(Comm& group, const std::vector<double>& values) {
  // Two floats carry each value exactly enough for reporting (and counts below 2^48 exactly): the
  // value split into a float and its rounding error.
  const int64_t n = int64_t(values.size());
  Tensor t = Tensor::zeros({2 * n});
  for (int64_t i = 0; i < n; ++i) {
    t.f32()[2 * i] = float(values[size_t(i)]);
    t.f32()[2 * i + 1] = float(values[size_t(i)] - double(t.f32()[2 * i]));
  }
  if (n > 0) group.all_reduce(t);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(t.f32()[2 * i]) + double(t.f32()[2 * i + 1]);
  return out;
}

}  // namespace tessera
