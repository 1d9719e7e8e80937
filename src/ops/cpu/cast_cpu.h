// CPU element-type conversions (contract in ops/cast.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tessera::cpu {

void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n);
void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n);
void copy_bytes(void* dst, const void* src, size_t bytes);

}  // namespace tessera::cpu
