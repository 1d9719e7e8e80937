// Host memory allocator with live and peak byte counters. Every Tensor storage on the CPU comes
// from here, so memory figures (metrics, ZeRO tests) are read from real allocations, not formulas.
#pragma once

#include <cstddef>

namespace tessera {

struct AllocatorStats {
  size_t current_bytes = 0;
  size_t peak_bytes = 0;
  size_t allocations = 0;
};

// 64-byte aligned, zero-initialised. Throws tessera::Error with the size asked for on failure.
void* host_allocate(size_t bytes);
void host_free(void* ptr, size_t bytes);

AllocatorStats host_allocator_stats();
// Starts a new peak measurement from the current live bytes.
void host_allocator_reset_peak();

}  // namespace tessera
