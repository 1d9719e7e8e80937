// CPU element-type conversions, one OpenMP loop each.
#include "ops/cpu/cast_cpu.h"

#include <cstring>
#include <type_traits>

namespace tessera::cpu {

template <typename H>
void cast_f32_to_half(H* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<H, bf16>) dst[i] = to_bf16(src[i]);
    else dst[i] = to_f16(src[i]);
  }
}

template <typename H>
void cast_half_to_f32(float* dst, const H* src, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

template void cast_f32_to_half<bf16>(bf16*, const float*, int64_t);
template void cast_f32_to_half<f16>(f16*, const float*, int64_t);
template void cast_half_to_f32<bf16>(float*, const bf16*, int64_t);
template void cast_half_to_f32<f16>(float*, const f16*, int64_t);

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

}  // namespace tessera::cpu
