// The process-wide choice of ops/deterministic_kernels.h.
#include "ops/deterministic_kernels.h"

#include <atomic>

namespace tessera {
namespace {

std::atomic<bool> chosen_deterministic{true};

}  // namespace

void set_deterministic_kernels(bool on) { chosen_deterministic = on; }

bool deterministic_kernels() { return chosen_deterministic; }

}  // namespace tessera
