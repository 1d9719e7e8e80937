// SwiGLU and GeGLU on the CPU: parallel over rows, one vectorised pass per row over the F gate/up
// pairs. sigmoid(g) = 1 / (1 + e^-g) through exp_approx, so the loops vectorise; it saturates to 1 for
// g > 87 and to ~0 for g < -88. GeGLU's GELU is gelu_tanh.h's. Elementwise, so any
// thread count gives the same bits.
#include "ops/cpu/swiglu_cpu.h"

#include "ops/cpu/gelu_tanh.h"
#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

// The gate activations, each with act(g) and act'(g).
struct Silu {
  static float sigmoid(float g) { return 1.0f / (1.0f + exp_approx(-g)); }
  static float value(float g) { return g * sigmoid(g); }
  static float derivative(float g) {
    const float sg = sigmoid(g);
    return sg * (1.0f + g * (1.0f - sg));
  }
};
struct GeluTanh {
  static float value(float g) { return gelu_tanh(g); }
  static float derivative(float g) { return gelu_tanh_derivative(g); }
};

template <typename Act>
void forward_rows(float* out, const float* h, int64_t N, int64_t F) {
#pragma omp parallel for if (N * F >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* gate = h + n * 2 * F;  // (F)
    const float* up = gate + F;         // (F)
    float* out_n = out + n * F;         // (F)
#pragma omp simd
    for (int64_t f = 0; f < F; f++) out_n[f] = Act::value(gate[f]) * up[f];
  }
}

template <typename Act>
void backward_rows(float* dh, const float* dout, const float* h, int64_t N, int64_t F) {
#pragma omp parallel for if (N * F >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* gate = h + n * 2 * F;   // (F)
    const float* up = gate + F;          // (F)
    const float* dout_n = dout + n * F;  // (F)
    float* dgate = dh + n * 2 * F;       // (F)
    float* dup = dgate + F;              // (F)
#pragma omp simd
    for (int64_t f = 0; f < F; f++) {
      dgate[f] = dout_n[f] * up[f] * Act::derivative(gate[f]);
      dup[f] = dout_n[f] * Act::value(gate[f]);
    }
  }
}

}  // namespace

void swiglu_forward(float* out, const float* h, int64_t N, int64_t F, bool gelu) {
  if (gelu) return forward_rows<GeluTanh>(out, h, N, F);
  forward_rows<Silu>(out, h, N, F);
}

void swiglu_backward(float* dh, const float* dout, const float* h, int64_t N, int64_t F, bool gelu) {
  if (gelu) return backward_rows<GeluTanh>(dh, dout, h, N, F);
  backward_rows<Silu>(dh, dout, h, N, F);
}

}  // namespace tessera::cpu
