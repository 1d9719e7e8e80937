// Sums of host values over a communicator's group, for what ranks report or agree on (losses, counts,
// flags, norms) and for small statistics a layer needs whole (the MoE router's balance under
// context parallelism).
#pragma once

#include <vector>

#include "parallel/comm.h"

namespace tessera {

// Sum of each value over `group`, exact enough for reporting (counts below 2^48 exactly).
std::vector<double> sum_over(Comm& group, const std::vector<double>& values);

}  // namespace tessera
