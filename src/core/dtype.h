// Element types: fp32 is the compute type on CPU; bf16 and fp16 are storage types with exact
// round-to-nearest-even conversion to and from fp32; integer types hold token ids.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera {

enum class DType { f32, bf16, f16, i32, u16, u32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::bf16: case DType::f16: case DType::u16: return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u16: return "u16";
    case DType::u32: return "u32";
  }
  return "?";
}

// bfloat16: the top 16 bits of an fp32.
struct bf16 {
  uint16_t bits;
};

// IEEE 754 binary16.
struct f16 {
  uint16_t bits;
};

inline float to_float(bf16 v) { return std::bit_cast<float>(uint32_t(v.bits) << 16); }

inline bf16 to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                              // round to nearest even
  return bf16{uint16_t(u >> 16)};
}

float to_float(f16 v);
f16 to_f16(float f);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::u32; }

}  // namespace tessera
