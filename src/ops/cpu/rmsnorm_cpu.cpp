// RMSNorm on the CPU. Rows are independent, so forward and dx run parallel over rows; dweight is a
// column sum, taken in a second pass where each thread owns a column slice and adds rows in order,
// so it is bitwise the same for any thread count.
#include "ops/cpu/rmsnorm_cpu.h"

#include <cmath>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int64_t C, float eps) {
#pragma omp parallel for if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* x_n = x + n * C;  // (C)
    float* out_n = out + n * C;    // (C)
    float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t c = 0; c < C; c++) sum_sq += x_n[c] * x_n[c];
    const float s = 1.0f / std::sqrt(sum_sq / float(C) + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; c++) out_n[c] = x_n[c] * s * weight[c];
    rstd[n] = s;
  }
}

void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int64_t N, int64_t C, bool add_to_dx) {
  // With xhat = x * rstd and dnorm = dout * weight: dx = rstd * (dnorm - xhat * mean(dnorm * xhat)).
#pragma omp parallel for if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* dout_n = dout + n * C;  // (C)
    const float* x_n = x + n * C;        // (C)
    float* dx_n = dx + n * C;            // (C)
    const float s = rstd[n];
    float dnorm_xhat_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_xhat_sum)
    for (int64_t c = 0; c < C; c++) dnorm_xhat_sum += dout_n[c] * weight[c] * (x_n[c] * s);
    const float dnorm_xhat_mean = dnorm_xhat_sum / float(C);
    auto dx_at = [&](int64_t c) { return s * (dout_n[c] * weight[c] - x_n[c] * s * dnorm_xhat_mean); };
    write_or_add(dx_n, C, add_to_dx, dx_at);
  }
  // dweight += sum_n dout * xhat.
#pragma omp parallel if (N * C >= kMinParallelElements)
  {
    const ColumnRange cols = thread_columns(C);
    for (int64_t n = 0; n < N; n++) {
      const float* dout_n = dout + n * C;
      const float* x_n = x + n * C;
      const float s = rstd[n];
#pragma omp simd
      for (int64_t c = cols.begin; c < cols.end; c++) dweight[c] += dout_n[c] * (x_n[c] * s);
    }
  }
}

}  // namespace tessera::cpu
