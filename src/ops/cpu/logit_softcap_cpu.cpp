// The logits' soft cap on the CPU, parallel over entries; soft_cap's tanh_approx vectorises.
#include "ops/cpu/logit_softcap_cpu.h"

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void logit_softcap(float* x, int64_t n, float softcap) {
  const float inv = 1.0f / softcap;
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelElements)
  for (int64_t i = 0; i < n; i++) x[i] = soft_cap(x[i], softcap, inv);
}

}  // namespace tessera::cpu
