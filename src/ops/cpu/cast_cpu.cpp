// CPU element-type conversions, one OpenMP loop each.
#include "ops/cpu/cast_cpu.h"

#include <cstring>

namespace tessera::cpu {

void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

}  // namespace tessera::cpu
