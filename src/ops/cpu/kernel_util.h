// Pieces shared by the CPU kernels: exp and tanh written so that loops over them vectorise (libm's
// expf/tanhf are scalar calls without -ffast-math), Gemma 2's soft cap on them, the split of C columns over an OpenMP team for
// race-free column sums, the size below which an elementwise loop stays on one thread, and a row
// written or added to.
#pragma once

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>

namespace tessera::cpu {

// Loops over less work than this (in elements, or multiply-adds for attention) run on the calling
// thread: waking the OpenMP team would cost more than it saves.
constexpr int64_t kMinParallelElements = int64_t(1) << 15;

// e^x within about 2 ulp: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial,
// 2^n written straight into the exponent bits. x < -87 gives 0 (no denormals), x > 88 is clamped
// to 88, NaN stays NaN.
inline float exp_approx(float x) {
  x = x > 88.0f ? 88.0f : x;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer held in the low bits
  const float t = x * 1.44269504f + shifter;
  const float n = t - shifter;
  const int32_t e = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(shifter);
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // ln2 split in a short head and a tail
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_n = std::bit_cast<float>((e + 127) << 23);
  return x < -87.0f ? 0.0f : p * two_n;
}

// tanh(x) = 1 - 2 / (e^{2x} + 1); saturates to +-1 through exp_approx's clamps.
inline float tanh_approx(float x) { return 1.0f - 2.0f / (exp_approx(2.0f * x) + 1.0f); }

// Gemma 2's soft cap, cap tanh(x / cap), with inv_cap = 1 / cap: attention scores and logits alike.
inline float soft_cap(float x, float cap, float inv_cap) { return cap * tanh_approx(x * inv_cap); }
// Its derivative from the capped value y: 1 - (y / cap)^2 = 1 - tanh^2.
inline float soft_cap_derivative(float y, float inv_cap) {
  const float t = y * inv_cap;
  return 1.0f - t * t;
}

// The columns [begin, end) of a C-column matrix that this thread owns inside an OpenMP parallel
// region: whole 64-byte lines per thread, so column sums need no atomics, share no cache line and
// add rows in a fixed order.
struct ColumnRange {
  int64_t begin;
  int64_t end;
};

inline ColumnRange thread_columns(int64_t C) {
  const int64_t threads = omp_get_num_threads();
  const int64_t per_thread = ((C + threads - 1) / threads + 15) / 16 * 16;
  const int64_t begin = std::min(C, omp_get_thread_num() * per_thread);
  return {begin, std::min(C, begin + per_thread)};
}

// dst[c] = value(c) for c < n, or dst[c] += value(c) when add (a gradient joining one already there).
template <typename F>
inline void write_or_add(float* dst, int64_t n, bool add, F value) {
  if (add) {
#pragma omp simd
    for (int64_t c = 0; c < n; c++) dst[c] += value(c);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < n; c++) dst[c] = value(c);
  }
}

}  // namespace tessera::cpu
