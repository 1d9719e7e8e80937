// GELU on the CPU: one vectorised pass, parallel over elements, with u = sqrt(2/pi) (x + 0.044715 x^3):
//   gelu(x) = 0.5 x (1 + tanh u);  gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx.
#include "ops/cpu/gelu_cpu.h"

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(float* out, const float* x, int64_t n) {
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    out[i] = 0.5f * xi * (1.0f + tanh_approx(u));
  }
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    const float th = tanh_approx(u);
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kCubic * xi * xi);
    dx[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * xi * (1.0f - th * th) * du_dx);
  }
}

}  // namespace tessera::cpu
