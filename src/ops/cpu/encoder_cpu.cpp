// Token + position embedding on the CPU. Forward is parallel over (b,t) rows. In backward a token
// may repeat, so dwte rows collide: threads own column slices instead, which keeps the sum free of
// atomics and its order fixed.
#include "ops/cpu/encoder_cpu.h"

#include <algorithm>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                     int64_t C, int64_t first, int64_t rows) {
#pragma omp parallel for collapse(2) if (B * T * C >= kMinParallelElements)
  for (int64_t b = 0; b < B; b++) {
    for (int64_t t = 0; t < T; t++) {
      float* out_bt = out + (b * T + t) * C;  // (C)
      const int64_t row = int64_t(tokens[b * T + t]) - first;
      if (row < 0 || row >= rows) {  // another rank's slice of the vocabulary
        if (wpe)
          std::copy(wpe + t * C, wpe + (t + 1) * C, out_bt);
        else
          std::fill(out_bt, out_bt + C, 0.0f);
        continue;
      }
      const float* wte_row = wte + row * C;  // (C)
      if (!wpe) {
        std::copy(wte_row, wte_row + C, out_bt);
        continue;
      }
      const float* wpe_row = wpe + t * C;  // (C)
#pragma omp simd
      for (int64_t c = 0; c < C; c++) out_bt[c] = wte_row[c] + wpe_row[c];
    }
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t T,
                      int64_t C, int64_t first, int64_t rows) {
  // dwpe: position t owns its row.
#pragma omp parallel for if (dwpe && B * T * C >= kMinParallelElements)
  for (int64_t t = 0; t < (dwpe ? T : 0); t++) {
    float* dwpe_row = dwpe + t * C;  // (C)
    for (int64_t b = 0; b < B; b++) {
      const float* dout_bt = dout + (b * T + t) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; c++) dwpe_row[c] += dout_bt[c];
    }
  }
  // dwte: each thread adds its column slice of every row, in (b,t) order.
#pragma omp parallel if (B * T * C >= kMinParallelElements)
  {
    const ColumnRange cols = thread_columns(C);
    for (int64_t bt = 0; bt < B * T; bt++) {
      const int64_t row = int64_t(tokens[bt]) - first;
      if (row < 0 || row >= rows) continue;
      float* dwte_row = dwte + row * C;
      const float* dout_bt = dout + bt * C;
#pragma omp simd
      for (int64_t c = cols.begin; c < cols.end; c++) dwte_row[c] += dout_bt[c];
    }
  }
}

}  // namespace tessera::cpu
