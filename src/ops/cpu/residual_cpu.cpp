// Residual connection on the CPU: elementwise, parallel and vectorised.
#include "ops/cpu/residual_cpu.h"

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, int64_t n) {
#pragma omp parallel for simd if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}

}  // namespace tessera::cpu
