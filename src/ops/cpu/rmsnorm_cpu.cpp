// RMSNorm on the CPU, of whole rows or of rows split over a group (the group's statistics given).
// Rows are independent, so forward and dx run parallel over rows; dweight is a
// column sum, taken in a second pass where each thread owns a column slice and adds rows in order,
// so it is bitwise the same for any thread count.
#include "ops/cpu/rmsnorm_cpu.h"

#include <cmath>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

namespace {

float row_sum_squares(const float* x_n, int64_t C) {
  float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
  for (int64_t c = 0; c < C; c++) sum_sq += x_n[c] * x_n[c];
  return sum_sq;
}

// Σ dout·weight·xhat of one row.
float row_dnorm_xhat_sum(const float* dout_n, const float* x_n, const float* weight, float s, int64_t C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < C; c++) sum += dout_n[c] * weight[c] * (x_n[c] * s);
  return sum;
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int64_t C, float eps,
                     const float* sums, int64_t width) {
  const float row_width = float(sums ? width : C);
#pragma omp parallel for if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* x_n = x + n * C;  // (C)
    float* out_n = out + n * C;    // (C)
    const float sum_sq = sums ? sums[n] : row_sum_squares(x_n, C);
    const float s = 1.0f / std::sqrt(sum_sq / row_width + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; c++) out_n[c] = x_n[c] * s * weight[c];
    rstd[n] = s;
  }
}

void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int64_t N, int64_t C, bool add_to_dx, const float* dots, int64_t width) {
  // With xhat = x * rstd and dnorm = dout * weight: dx = rstd * (dnorm - xhat * mean(dnorm * xhat)).
  const float row_width = float(dots ? width : C);
#pragma omp parallel for if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) {
    const float* dout_n = dout + n * C;  // (C)
    const float* x_n = x + n * C;        // (C)
    float* dx_n = dx + n * C;            // (C)
    const float s = rstd[n];
    const float dnorm_xhat_sum = dots ? dots[n] : row_dnorm_xhat_sum(dout_n, x_n, weight, s, C);
    const float dnorm_xhat_mean = dnorm_xhat_sum / row_width;
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

void rmsnorm_partial_sums(float* sums, const float* x, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) sums[n] = row_sum_squares(x + n * C, C);
}

void rmsnorm_partial_dots(float* dots, const float* dout, const float* x, const float* weight, const float* rstd,
                          int64_t N, int64_t C) {
#pragma omp parallel for if (N * C >= kMinParallelElements)
  for (int64_t n = 0; n < N; n++) dots[n] = row_dnorm_xhat_sum(dout + n * C, x + n * C, weight, rstd[n], C);
}

}  // namespace tessera::cpu
