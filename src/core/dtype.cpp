// fp16 <-> fp32 conversion with round-to-nearest-even, subnormals, infinities and NaN.
#include "core/dtype.h"

namespace tessera {

float to_float(f16 v) {
  uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  uint32_t exponent = (v.bits >> 10) & 0x1fu;
  uint32_t mantissa = v.bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    float magnitude = float(mantissa) * 0x1p-24f;  // subnormal: mantissa * 2^-24
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

f16 to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};  // NaN
  if (magnitude >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // rounds to infinity
  if (magnitude < 0x38800000u) {                                       // subnormal or zero in fp16
    float value = std::bit_cast<float>(magnitude) * 0x1p24f;          // in units of 2^-24
    uint32_t units = uint32_t(value);
    float rest = value - float(units);
    if (rest > 0.5f || (rest == 0.5f && (units & 1u))) ++units;
    return f16{uint16_t(sign | units)};
  }
  uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return f16{uint16_t(sign | ((rounded - (112u << 23)) >> 13))};
}

}  // namespace tessera
