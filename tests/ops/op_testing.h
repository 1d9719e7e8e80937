// Helpers for the op tests: tensors from values, double-precision sums and comparisons, and the
// central-difference derivative of a scalar loss with respect to every element of a tensor.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "support/test_support.h"

namespace tessera::testing {

inline Tensor random_tensor(Shape shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::zeros(shape);
  std::vector<float> values = random_floats(t.numel(), seed, lo, hi);
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

// Values over many binades and both signs: uniform in (-1, 1) times 2^k, the integer k uniform in
// [lo_exp, hi_exp]; for ops whose result depends on the magnitude's binade (fp8 rounding).
inline Tensor random_wide_tensor(Shape shape, uint64_t seed, int lo_exp, int hi_exp) {
  Tensor t = random_tensor(std::move(shape), seed);
  const std::vector<float> k = random_floats(t.numel(), seed + 1, float(lo_exp), float(hi_exp + 1));
  for (int64_t i = 0; i < t.numel(); i++)
    t.f32()[i] = std::ldexp(t.f32()[i], std::min(hi_exp, int(std::floor(k[size_t(i)]))));
  return t;
}

inline Tensor tensor_of(Shape shape, const std::vector<float>& values) {
  Tensor t = Tensor::zeros(std::move(shape));
  EXPECT_EQ(int64_t(values.size()), t.numel());
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

inline Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::zeros(t.shape(), t.dtype());
  std::copy(t.f32(), t.f32() + t.numel(), c.f32());
  return c;
}

// Packed sequences: for each batch row, the lengths of its documents in order (summing to T).
using DocumentLengths = std::vector<std::vector<int32_t>>;

// doc_starts (B = lengths.size(), T) i32 on the host, as ops/attention.h takes it: each token's document
// start. Fails the test when a row's lengths do not sum to T.
inline Tensor doc_starts_of_lengths(int64_t T, const DocumentLengths& lengths) {
  const int64_t B = int64_t(lengths.size());
  Tensor starts = Tensor::zeros({B, T}, DType::i32);
  for (int64_t b = 0; b < B; b++) {
    int64_t t = 0;
    for (const int32_t length : lengths[size_t(b)])
      for (int32_t i = 0; i < length; i++, t++)
        if (t < T) starts.data<int32_t>()[b * T + t] = int32_t(t - i);
    EXPECT_EQ(t, T) << "the document lengths of batch row " << b << " sum to " << t << ", not T = " << T;
  }
  return starts;
}

// The document starts (B, positions.size()) of query rows at `positions` of (B,T) doc_starts: what
// a context-parallel rank's share of the sequences holds (true positions).
inline Tensor doc_starts_at(const Tensor& doc_starts, const std::vector<int32_t>& positions) {
  const int64_t B = doc_starts.size(0), T = doc_starts.size(1), n = int64_t(positions.size());
  Tensor rows = Tensor::zeros({B, n}, DType::i32);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < n; t++)
      rows.data<int32_t>()[b * n + t] = doc_starts.data<int32_t>()[b * T + positions[size_t(t)]];
  return rows;
}

inline void fill(Tensor& t, float value) { std::fill(t.f32(), t.f32() + t.numel(), value); }

// sum_i a[i] * b[i] in double: the loss whose gradient with respect to a is b.
inline double dot(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); i++) s += double(a.f32()[i]) * double(b.f32()[i]);
  return s;
}

// d loss / d t[i] for every i, by central differences with step h; t is restored afterwards.
inline std::vector<double> numeric_gradient(Tensor& t, const std::function<double()>& loss, float h) {
  std::vector<double> grad(size_t(t.numel()));
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); i++) {
    const float saved = p[i];
    p[i] = saved + h;
    const double up = loss();
    p[i] = saved - h;
    const double down = loss();
    p[i] = saved;
    grad[size_t(i)] = (up - down) / (2.0 * double(h));
  }
  return grad;
}

// Every actual[i] within atol + rtol * |expected[i]|.
inline void expect_close(const float* actual, const std::vector<double>& expected, double atol, double rtol,
                         const char* what) {
  int reported = 0;
  for (size_t i = 0; i < expected.size(); i++) {
    const double err = std::fabs(double(actual[i]) - expected[i]);
    if (!(err <= atol + rtol * std::fabs(expected[i])) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", expected " << expected[i];
  }
  EXPECT_EQ(reported, 0) << what << ": elements out of tolerance";
}

inline void expect_close(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol,
                         const char* what) {
  ASSERT_EQ(actual.numel(), int64_t(expected.size())) << what;
  expect_close(actual.f32(), expected, atol, rtol, what);
}

// Runs fn with OpenMP teams of `threads` threads, then restores the previous setting. Kernels split
// work by thread count (rows, column slices), so results on one thread and on several must agree.
inline void with_threads(int threads, const std::function<void()>& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(saved);
}

// Every element of a equals the one of b, bit for bit.
inline void expect_identical(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  int64_t differing = 0;
  for (int64_t i = 0; i < a.numel(); i++) differing += a.f32()[i] != b.f32()[i];
  EXPECT_EQ(differing, 0) << what << ": elements differ";
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace tessera::testing
