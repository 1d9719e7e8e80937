// The OCP 8-bit float formats fp8 training stores tensors in: E4M3 (bias 7, no infinities, largest
// 448, NaN = S.1111.111) and E5M2 (bias 15, IEEE-like: infinities and NaNs, largest 57344).
// fp8_encode rounds an fp32 to nearest even and saturates whatever lies beyond the largest finite
// magnitude (infinities too) to it, as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) does, bit
// for bit; fp8_decode is exact. Integer arithmetic in one header, shared by host C++ and CUDA kernels.
#pragma once

#include <stdint.h>

#include <bit>
#include <string_view>

#include "core/host_device.h"

namespace tessera {

enum class Fp8Format { e4m3, e5m2 };

// The largest finite magnitude of a format.
TS_HOST_DEVICE constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0f : 57344.0f; }

constexpr std::string_view fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

namespace fp8_detail {

// A code is sign (1 bit) | exponent field | mantissa_bits bits of mantissa.
struct Layout {
  int mantissa_bits;
  int bias;
  uint32_t max_code;        // the largest finite magnitude's code, sign clear
  uint32_t max_float_bits;  // the fp32 bits of that magnitude
};

TS_HOST_DEVICE constexpr Layout layout_of(Fp8Format f) {
  // 448 = 1.75 * 2^8 = fp32 0x43e00000; 57344 = 1.75 * 2^15 = fp32 0x47600000
  return f == Fp8Format::e4m3 ? Layout{3, 7, 0x7eu, 0x43e00000u} : Layout{2, 15, 0x7bu, 0x47600000u};
}

TS_HOST_DEVICE inline uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}

TS_HOST_DEVICE inline float float_of(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

}  // namespace fp8_detail

// The code nearest to x, ties to the even code (even mantissa); |x| at or beyond the largest finite
// magnitude (infinities included) gives that magnitude with x's sign; any NaN gives 0x7f, the NaN
// code of both formats; -0 and negative values that round to zero give 0x80.
TS_HOST_DEVICE inline uint8_t fp8_encode(float x, Fp8Format f) {
  const fp8_detail::Layout l = fp8_detail::layout_of(f);
  const uint32_t u = fp8_detail::bits_of(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  if (a >= l.max_float_bits) return uint8_t(sign | l.max_code);
  // |x| = m * 2^(e - 23), m holding the implicit bit. (A zero or an fp32 subnormal has e = -127 and is
  // far below half the smallest fp8 subnormal: the shift below is then >= 32 and the count 0.)
  const int e = int(a >> 23) - 127;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  // The fp8 spacing at |x| is 2^(e_code - M): e_code = e in a normal binade, the smallest normal
  // exponent 1 - bias throughout the subnormal range.
  const int e_code = e > 1 - l.bias ? e : 1 - l.bias;
  const int shift = 23 - l.mantissa_bits + e_code - e;  // >= 23 - M
  // q = |x| / spacing, rounded to nearest even.
  uint32_t q = 0;
  if (shift < 32) {
    q = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) q++;
  }
  // A normal code is (e_code + bias) << M | (q - 2^M) = ((e_code + bias - 1) << M) + q, a q rounded up
  // to 2^(M+1) carrying into the next binade; in the subnormal range e_code + bias - 1 = 0 and the code
  // is q itself, q = 2^M being the smallest normal. |x| < max keeps the code at or below max_code.
  return uint8_t(sign | ((uint32_t(e_code + l.bias - 1) << l.mantissa_bits) + q));
}

// The value of a code, exactly: E4M3's S.1111.111 and E5M2's exponent 11111 with a non-zero mantissa
// are NaN; E5M2's 11111.00 is +-infinity; exponent 0 is subnormal (mantissa * 2^(1 - bias - M)).
TS_HOST_DEVICE inline float fp8_decode(uint8_t bits, Fp8Format f) {
  const fp8_detail::Layout l = fp8_detail::layout_of(f);
  const uint32_t sign = uint32_t(bits & 0x80u) << 24;
  const uint32_t exponent = uint32_t(bits & 0x7fu) >> l.mantissa_bits;
  const uint32_t mantissa = bits & ((1u << l.mantissa_bits) - 1u);
  const bool top_exponent = exponent == (0x7fu >> l.mantissa_bits);
  if (f == Fp8Format::e4m3 ? (top_exponent && mantissa == 7u) : top_exponent)
    return fp8_detail::float_of(sign | (mantissa == 0 ? 0x7f800000u : 0x7fc00000u));
  if (exponent == 0) {
    // mantissa (< 2^M) times a power of two: one exact multiplication
    const float spacing = fp8_detail::float_of(uint32_t(127 + 1 - l.bias - l.mantissa_bits) << 23);
    return fp8_detail::float_of(sign | fp8_detail::bits_of(float(mantissa) * spacing));
  }
  return fp8_detail::float_of(sign | ((exponent + 127u - uint32_t(l.bias)) << 23) |
                              (mantissa << (23 - l.mantissa_bits)));
}

}  // namespace tessera
