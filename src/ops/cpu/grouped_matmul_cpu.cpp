// The experts' grouped linear layers on the CPU: one cblas_sgemm per non-empty group, called
// outside any OpenMP region so the OpenMP build of OpenBLAS spreads each over all threads, exactly
// as ops/cpu/matmul_cpu.cpp does for one dense layer. Groups run one after another; empty ones are
// skipped (their dweight slice gets += 0, i.e. stays as it is).
#include "ops/cpu/grouped_matmul_cpu.h"

#include <cblas.h>

namespace tessera::cpu {

void grouped_matmul_forward(float* out, const float* x, const float* weight, const int32_t* offsets, int64_t E,
                            int64_t C, int64_t OC) {
  for (int64_t e = 0; e < E; e++) {
    const int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
    if (rows == 0) continue;
    // out_e (rows,OC) = x_e (rows,C) * weight[e] (OC,C)^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(OC), int(C), 1.0f, x + begin * C, int(C),
                weight + e * OC * C, int(C), 0.0f, out + begin * OC, int(OC));
  }
}

void grouped_matmul_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                             const int32_t* offsets, int64_t E, int64_t C, int64_t OC) {
  for (int64_t e = 0; e < E; e++) {
    const int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
    if (rows == 0) continue;
    const float* dout_e = dout + begin * OC;  // (rows,OC)
    const float* x_e = x + begin * C;         // (rows,C)
    // dx_e (rows,C) = dout_e (rows,OC) * weight[e] (OC,C)
    if (dx != nullptr)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(C), int(OC), 1.0f, dout_e, int(OC),
                  weight + e * OC * C, int(C), 0.0f, dx + begin * C, int(C));
    // dweight[e] (OC,C) += dout_e^T (OC,rows) * x_e (rows,C)
    if (dweight != nullptr)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(OC), int(C), int(rows), 1.0f, dout_e, int(OC), x_e, int(C),
                1.0f, dweight + e * OC * C, int(C));
  }
}

}  // namespace tessera::cpu
