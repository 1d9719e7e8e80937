// SwiGLU on the CPU: parallel over rows, one vectorised pass per row over the F gate/up pairs.
// sigmoid(g) = 1 / (1 + e^-g) through exp_approx, so the loops vectorise; it saturates to 1 for
// g > 87 and to ~0 for g < -88. Elementwise, so any thread count gives the same bits.
#include "ops/cpu/swiglu_cpu.h"

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {
inline float sigmoid(float g) { return 1.0f / (1.0f + exp_approx(-g)); }
}  // namespace

void swiglu_forward(float* out, const float* h, int64_t N, int64_t F) {
#pragma omp parallel for if (N * F >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* gate = h + n * 2 * F;  // (F)
    const float* up = gate + F;         // (F)
    float* out_n = out + n * F;         // (F)
#pragma omp simd
    for (int64_t f = 0; f < F; f++) out_n[f] = gate[f] * sigmoid(gate[f]) * up[f];
  }
}

void swiglu_backward(float* dh, const float* dout, const float* h, int64_t N, int64_t F) {
#pragma omp parallel for if (N * F >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* gate = h + n * 2 * F;   // (F)
    const float* up = gate + F;          // (F)
    const float* dout_n = dout + n * F;  // (F)
    float* dgate = dh + n * 2 * F;       // (F)
    float* dup = dgate + F;              // (F)
#pragma omp simd
    for (int64_t f = 0; f < F; f++) {
      const float g = gate[f], sg = sigmoid(g);
      dgate[f] = dout_n[f] * up[f] * (sg * (1.0f + g * (1.0f - sg)));
      dup[f] = dout_n[f] * (g * sg);
    }
  }
}

}  // namespace tessera::cpu
