// Counter-based random numbers (Philox4x32-10). A value depends only on (seed, stream, index), so
// any shard of a tensor can be filled without the rest (DESIGN.md invariant 2): parameter init is
// keyed on (seed, parameter name, element index), data order on (seed, epoch).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tessera {

// Philox4x32-10 of the 128-bit counter (index, stream) under the 64-bit key `seed`.
std::array<uint32_t, 4> philox(uint64_t seed, uint64_t stream, uint64_t index);

// A stable 64-bit hash (FNV-1a) of a name, used as a stream id.
uint64_t stream_id(std::string_view name);

// Uniform in [0, 1) from 24 random bits.
float uniform_at(uint64_t seed, uint64_t stream, uint64_t index);

// Standard normal via Box-Muller on the first two words of philox(seed, stream, index).
float normal_at(uint64_t seed, uint64_t stream, uint64_t index);

// out[i] = mean + std * normal_at(seed, stream_id(name), first_index + i).
void fill_normal(float* out, int64_t n, uint64_t seed, std::string_view name, float mean, float std,
                 int64_t first_index = 0);

// A sequential generator for sampling (text generation): each call advances the counter.
class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  float uniform() { return uniform_at(seed_, stream_, counter_++); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n);
  uint64_t counter() const { return counter_; }
  void set_counter(uint64_t c) { counter_ = c; }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t counter_ = 0;
};

}  // namespace tessera
