// GELU on the CPU: one vectorised pass, parallel over elements (the formulas in gelu_tanh.h).
#include "ops/cpu/gelu_cpu.h"

#include "ops/cpu/gelu_tanh.h"

namespace tessera::cpu {

void gelu_forward(float* out, const float* x, int64_t n) {
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) out[i] = gelu_tanh(x[i]);
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) dx[i] = dout[i] * gelu_tanh_derivative(x[i]);
}

}  // namespace tessera::cpu
