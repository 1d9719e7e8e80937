// GELU on the CPU: one vectorised pass, parallel over elements; the tanh form's formulas are in
// gelu_tanh.h, the exact form's here: gelu(x) = x Φ(x), gelu'(x) = Φ(x) + x φ(x), with Φ(x) =
// 0.5 (1 + erf(x / sqrt 2)) and φ(x) = exp(-x^2 / 2) / sqrt(2 pi).
#include "ops/cpu/gelu_cpu.h"

#include <cmath>

#include "ops/cpu/gelu_tanh.h"

namespace tessera::cpu {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;

float gelu_exact(float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); }

float gelu_exact_derivative(float x) {
  return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}

}  // namespace

void gelu_forward(float* out, const float* x, int64_t n, bool exact) {
  if (exact) {
#pragma omp parallel for if (n >= kMinParallelElements)
    for (int64_t i = 0; i < n; i++) out[i] = gelu_exact(x[i]);
    return;
  }
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) out[i] = gelu_tanh(x[i]);
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t n, bool exact) {
  if (exact) {
#pragma omp parallel for if (n >= kMinParallelElements)
    for (int64_t i = 0; i < n; i++) dx[i] = dout[i] * gelu_exact_derivative(x[i]);
    return;
  }
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) dx[i] = dout[i] * gelu_tanh_derivative(x[i]);
}

}  // namespace tessera::cpu
