// LayerNorm on the CPU, eps = 1e-5, with a bias or without (null: Cohere's). Rows are independent, so forward and
// dx run parallel over rows; dweight and dbias are column sums, taken in a second pass where each thread owns a
// column slice.
#include "ops/cpu/layernorm_cpu.h"

#include <cmath>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight, const float* bias,
                       int64_t N, int64_t C) {
  const float eps = 1e-5f;
#pragma omp parallel for if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* x_n = x + n * C;  // (C)
    float* out_n = out + n * C;    // (C)
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; c++) sum += x_n[c];
    const float m = sum / float(C);
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; c++) var += (x_n[c] - m) * (x_n[c] - m);
    const float s = 1.0f / std::sqrt(var / float(C) + eps);
    if (bias) {
#pragma omp simd
      for (int64_t c = 0; c < C; c++) out_n[c] = (x_n[c] - m) * s * weight[c] + bias[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; c++) out_n[c] = (x_n[c] - m) * s * weight[c];
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool add_to_dx) {
  // dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight.
#pragma omp parallel for if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* dout_n = dout + n * C;  // (C)
    const float* x_n = x + n * C;        // (C)
    float* dx_n = dx + n * C;            // (C)
    const float m = mean[n], s = rstd[n];
    float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_xhat_sum)
    for (int64_t c = 0; c < C; c++) {
      const float dnorm = dout_n[c] * weight[c];
      dnorm_sum += dnorm;
      dnorm_xhat_sum += dnorm * (x_n[c] - m) * s;
    }
    const float dnorm_mean = dnorm_sum / float(C), dnorm_xhat_mean = dnorm_xhat_sum / float(C);
    auto dx_at = [&](int64_t c) {
      return s * (dout_n[c] * weight[c] - dnorm_mean - (x_n[c] - m) * s * dnorm_xhat_mean);
    };
    write_or_add(dx_n, C, add_to_dx, dx_at);
  }
  // dweight += sum_n dout * xhat;  dbias += sum_n dout.
#pragma omp parallel if (N * C >= kMinParallelElements)
  {
    const ColumnRange cols = thread_columns(C);
    for (int64_t n = 0; n < N; n++) {
      const float* dout_n = dout + n * C;
      const float* x_n = x + n * C;
      const float m = mean[n], s = rstd[n];
#pragma omp simd
      for (int64_t c = cols.begin; c < cols.end; c++) dweight[c] += dout_n[c] * (x_n[c] - m) * s;
      if (!dbias) continue;
#pragma omp simd
      for (int64_t c = cols.begin; c < cols.end; c++) dbias[c] += dout_n[c];
    }
  }
}

}  // namespace tessera::cpu
