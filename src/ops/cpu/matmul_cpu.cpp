// Linear layer on the CPU: every product is one cblas_sgemm called outside any OpenMP region, so
// the OpenMP build of OpenBLAS spreads it over all threads. The bias is written into out first and
// the GEMM accumulates onto it (beta = 1), which saves a pass over out; dweight accumulates the same
// way, and dbias is a column sum where each thread owns a column slice.
#include "ops/cpu/matmul_cpu.h"

#include <cblas.h>

#include <cstring>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void matmul_forward(float* out, const float* x, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC) {
  if (bias != nullptr) {
#pragma omp parallel for if (N * OC >= kMinParallelElements)
    for (int64_t n = 0; n < N; n++) std::memcpy(out + n * OC, bias, size_t(OC) * sizeof(float));
  }
  // out (N,OC) = x (N,C) * weight (OC,C)^T + beta * out
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(N), int(OC), int(C), 1.0f, x, int(C), weight, int(C),
              bias != nullptr ? 1.0f : 0.0f, out, int(OC));
}

void matmul_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                     const float* weight, int64_t N, int64_t C, int64_t OC) {
  // dx (N,C) = dout (N,OC) * weight (OC,C)
  if (dx != nullptr)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(N), int(C), int(OC), 1.0f, dout, int(OC), weight,
                int(C), 0.0f, dx, int(C));
  // dweight (OC,C) += dout^T (OC,N) * x (N,C); none (nor dbias) when the caller takes it later
  if (dweight == nullptr) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(OC), int(C), int(N), 1.0f, dout, int(OC), x, int(C),
              1.0f, dweight, int(C));
  if (dbias == nullptr) return;
  // dbias (OC) += sum over the N rows of dout
#pragma omp parallel if (N * OC >= kMinParallelElements)
  {
    const ColumnRange cols = thread_columns(OC);
    for (int64_t n = 0; n < N; n++) {
      const float* dout_n = dout + n * OC;
#pragma omp simd
      for (int64_t o = cols.begin; o < cols.end; o++) dbias[o] += dout_n[o];
    }
  }
}

}  // namespace tessera::cpu
