// CPU element-type conversions (contract in ops/cast.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tessera::cpu {

// dst (n) = src (n) as a 16-bit float H (bf16 or f16), rounded to nearest even.
template <typename H> void cast_f32_to_half(H* dst, const float* src, int64_t n);
// dst (n) = src (n) widened to f32 (exact).
template <typename H> void cast_half_to_f32(float* dst, const H* src, int64_t n);
void copy_bytes(void* dst, const void* src, size_t bytes);

}  // namespace tessera::cpu
