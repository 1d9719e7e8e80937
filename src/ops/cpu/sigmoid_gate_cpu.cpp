// The sigmoid row gate on the CPU, parallel over rows; the sigmoid in double, once a row.
#include "ops/cpu/sigmoid_gate_cpu.h"

#include <cmath>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

float sigmoid(float z) { return float(1.0 / (1.0 + std::exp(-double(z)))); }

}  // namespace

void sigmoid_gate_add(float* out, const float* y, const float* z, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float s = sigmoid(z[n]);
    float* o = out + n * C;
    const float* y_n = y + n * C;
#pragma omp simd
    for (int64_t c = 0; c < C; c++) o[c] += s * y_n[c];
  }
}

void sigmoid_gate_backward(float* dy, float* dz, const float* dout, const float* y, const float* z, int64_t N,
                           int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float s = sigmoid(z[n]);
    const float *d = dout + n * C, *y_n = y + n * C;
    float* dy_n = dy + n * C;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; c++) {
      dy_n[c] = s * d[c];
      dot += d[c] * y_n[c];
    }
    dz[n] = s * (1.0f - s) * dot;
  }
}

}  // namespace tessera::cpu
