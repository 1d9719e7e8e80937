// Counter-based random numbers on Philox4x32-10 (core/philox.h): uniforms, normals, name streams.
#include "core/rng.h"

#include <cmath>
#include <numbers>

#include "core/philox.h"

namespace tessera {

std::array<uint32_t, 4> philox(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxWords r = philox4x32(seed, stream, index);
  return {r.w[0], r.w[1], r.w[2], r.w[3]};
}

uint64_t stream_id(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

float uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return float(philox(seed, stream, index)[0] >> 8) * 0x1p-24f;
}

float normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  std::array<uint32_t, 4> r = philox(seed, stream, index);
  double u1 = (double(r[0]) + 1.0) * 0x1p-32;  // (0, 1]
  double u2 = double(r[1]) * 0x1p-32;          // [0, 1)
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

void fill_normal(float* out, int64_t n, uint64_t seed, std::string_view name, float mean, float std,
                 int64_t first_index) {
  uint64_t stream = stream_id(name);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = mean + std * normal_at(seed, stream, uint64_t(first_index + i));
}

uint64_t Rng::below(uint64_t n) {
  std::array<uint32_t, 4> r = philox(seed_, stream_, counter_++);
  uint64_t wide = (uint64_t(r[0]) << 32) | r[1];
  return wide % n;
}

}  // namespace tessera
