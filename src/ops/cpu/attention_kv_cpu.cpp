// Attention over a key/value cache on the CPU: threads take (b, query head) pairs; each query row
// scores its visible keys, takes the softmax and sums the values.
#include "ops/cpu/attention_kv_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernel_util.h"

namespace tessera::cpu {

void attention_kv_forward(float* out, float* k_cache, float* v_cache, const float* qkv, int64_t B, int64_t Tq,
                          int64_t past, int64_t capacity, int64_t NH, int64_t NKV, int64_t HS, int64_t window,
                          float softcap) {
  const int64_t W = (NH + 2 * NKV) * HS, KV = NKV * HS;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < Tq; t++) {
      const float* row = qkv + (b * Tq + t) * W;
      std::copy(row + NH * HS, row + NH * HS + KV, k_cache + (b * capacity + past + t) * KV);
      std::copy(row + NH * HS + KV, row + W, v_cache + (b * capacity + past + t) * KV);
    }
  const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel if (B * NH * Tq * (past + Tq) * HS >= kMinParallelElements)
  {
    std::vector<float> scores(size_t(past + Tq));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < NH; h++) {
        const int64_t g = h / (NH / NKV);
        for (int64_t t = 0; t < Tq; t++) {
          const float* q = qkv + (b * Tq + t) * W + h * HS;
          const int64_t visible = past + t + 1, first = window > 0 ? std::max<int64_t>(0, visible - window) : 0;
          float max = -INFINITY;
          for (int64_t j = first; j < visible; j++) {
            const float* k = k_cache + (b * capacity + j) * KV + g * HS;
            float dot = 0.0f;
            for (int64_t i = 0; i < HS; i++) dot += q[i] * k[i];
            scores[size_t(j)] = softcap > 0.0f ? soft_cap(dot * scale, softcap, 1.0f / softcap) : dot * scale;
            max = std::max(max, scores[size_t(j)]);
          }
          float sum = 0.0f;
          for (int64_t j = first; j < visible; j++) sum += scores[size_t(j)] = std::exp(scores[size_t(j)] - max);
          float* o = out + (b * Tq + t) * NH * HS + h * HS;
          std::fill(o, o + HS, 0.0f);
          for (int64_t j = first; j < visible; j++) {
            const float p = scores[size_t(j)] / sum;
            const float* v = v_cache + (b * capacity + j) * KV + g * HS;
            for (int64_t i = 0; i < HS; i++) o[i] += p * v[i];
          }
        }
      }
  }
}

}  // namespace tessera::cpu
