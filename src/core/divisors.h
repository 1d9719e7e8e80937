// The divisors of a whole number, found in sqrt(n) steps: the batch sizes that split a global batch
// evenly (micro-batches, a data-parallel rank's share). Counting down from n instead would take
// hours for a batch flag such as 99999999999.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tessera {

// The divisors of n (n >= 0) that are at most `most`, largest first; none for n = 0.
inline std::vector<int64_t> divisors_up_to(int64_t n, int64_t most) {
  std::vector<int64_t> found;
  for (int64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    if (d <= most) found.push_back(d);
    if (n / d != d && n / d <= most) found.push_back(n / d);
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

}  // namespace tessera
