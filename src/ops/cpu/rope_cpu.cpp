// RoPE on the CPU. One table of cos/sin per (position t, frequency i), each computed in double from
// positions[t] * inv_freq[i] and rounded once to f32 (deterministic, within an ulp of HF's fp32 cache),
// then threads take (b, t) tokens and rotate that token's NH q heads and NKV k heads in f32. Every
// output element depends on its own inputs only, so any thread count gives the same bits.
#include "ops/cpu/rope_cpu.h"

#include <cmath>
#include <vector>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {
namespace {

// Rotates the last R channels of the NH + NKV heads of HS channels at x by (cos, sin) (R/2 each): with
// y the tail, the pair (y[i], y[i + R/2]) becomes (y[i] c - y[i + R/2] s, y[i + R/2] c + y[i] s).
void rotate_heads(float* x, const float* cos_t, const float* sin_t, int64_t heads, int64_t HS, int64_t R) {
  const int64_t half = R / 2;
  for (int64_t h = 0; h < heads; h++) {
    float* lo = x + h * HS + (HS - R);
    float* hi = lo + half;
#pragma omp simd
    for (int64_t i = 0; i < half; i++) {
      const float a = lo[i], b = hi[i];
      lo[i] = a * cos_t[i] - b * sin_t[i];
      hi[i] = b * cos_t[i] + a * sin_t[i];
    }
  }
}

// sign +1 rotates by +angle (forward), -1 by -angle (backward: sin(-a) = -sin(a) exactly in f32); the
// tables hold cos and sin times `rotated`, and the q heads are then multiplied by `query` (forward and
// backward alike: the scales are diagonal and commute with the transpose).
void rope_rotate(float* qkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                 int64_t NKV, int64_t HS, int64_t R, float rotated, float query, double sign) {
  const int64_t half = R / 2, row = (NH + 2 * NKV) * HS;
  std::vector<float> cos_table(size_t(T * half)), sin_table(size_t(T * half));  // (T, HS/2) each
#pragma omp parallel if (B * T * row >= kMinParallelElements)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = 0; i < half; i++) {
        const double angle = double(positions[t]) * double(inv_freq[i]);
        cos_table[size_t(t * half + i)] = float(std::cos(angle)) * rotated;
        sin_table[size_t(t * half + i)] = float(sign * std::sin(angle)) * rotated;
      }
    // The implicit barrier above publishes the tables.
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) {
        float* token = qkv + (b * T + t) * row;
        rotate_heads(token, cos_table.data() + t * half, sin_table.data() + t * half, NH + NKV, HS,
                     R);  // q then k: the first NH + NKV heads of the row
        if (query != 1.0f)
          for (int64_t c = 0; c < NH * HS; c++) token[c] *= query;
      }
  }
}

}  // namespace

void rope_forward(float* qkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                  int64_t NKV, int64_t HS, int64_t R, float rotated, float query) {
  rope_rotate(qkv, positions, inv_freq, B, T, NH, NKV, HS, R, rotated, query, 1.0);
}

void rope_backward(float* dqkv, const int32_t* positions, const float* inv_freq, int64_t B, int64_t T, int64_t NH,
                   int64_t NKV, int64_t HS, int64_t R, float rotated, float query) {
  rope_rotate(dqkv, positions, inv_freq, B, T, NH, NKV, HS, R, rotated, query, -1.0);
}

}  // namespace tessera::cpu
