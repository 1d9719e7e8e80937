// Host allocator: aligned_alloc plus atomic counters.
#include "core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace tessera {
namespace {
std::atomic<size_t> g_current{0};
std::atomic<size_t> g_peak{0};
std::atomic<size_t> g_allocations{0};
constexpr size_t kAlignment = 64;
}  // namespace

void* host_allocate(size_t bytes) {
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  TS_CHECK(ptr != nullptr, "out of host memory: asked for ", bytes, " bytes with ", g_current.load(),
           " bytes already in use; lower --micro-batch-size or --seq-len, or the model's size (--layers, --channels, ",
           "--vocab-size)");
  std::memset(ptr, 0, rounded);
  size_t now = g_current.fetch_add(bytes) + bytes;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  g_allocations.fetch_add(1);
  return ptr;
}

void host_free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  g_current.fetch_sub(bytes);
}

AllocatorStats host_allocator_stats() {
  return AllocatorStats{g_current.load(), g_peak.load(), g_allocations.load()};
}

void host_allocator_reset_peak() { g_peak.store(g_current.load()); }

}  // namespace tessera
