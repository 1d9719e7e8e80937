// Vector loads and stores for kernels templated on the storage type T (float, __nv_bfloat16, __half):
// kVec<T> consecutive elements (16 bytes) move in one instruction and are widened to / rounded from
// fp32 registers. A kernel taking a width W runs the same code with W = 1 (scalar, any alignment)
// or W = kVec<T> (pointers 16-byte aligned, run lengths multiples of W); launchers pick with
// is_aligned16. Included by .cu files only.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {

// Elements of T in 16 bytes: 4 floats, 8 bf16 or fp16.
template <typename T> constexpr int kVec = int(16 / sizeof(T));

inline bool is_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// W elements of T as memory holds them, moved in one instruction: a kernel can issue several loads
// before it widens any (load_f32_vec widens at once), or copy them exactly.
template <int W, typename T>
struct PackedChunk {
  static_assert(W == 1 || W * sizeof(T) == 16, "a width is 1 or 16 bytes");
  std::conditional_t<W == 1, T, int4> bits;
};

// p[0..W) as it lies; W == kVec<T> needs p 16-byte aligned; W == 1 needs nothing.
template <int W, typename T>
__device__ __forceinline__ PackedChunk<W, T> load_packed(const T* p) {
  if constexpr (W == 1) return {p[0]};
  else return {*reinterpret_cast<const int4*>(p)};
}

// p[0..W) = the chunk, unchanged; same alignment rule.
template <int W, typename T>
__device__ __forceinline__ void store_packed(T* p, const PackedChunk<W, T>& chunk) {
  if constexpr (W == 1) p[0] = chunk.bits;
  else *reinterpret_cast<int4*>(p) = chunk.bits;
}

// v[0..W) = the chunk in fp32.
template <int W, typename T>
__device__ __forceinline__ void widen(float (&v)[W], const PackedChunk<W, T>& chunk) {
  if constexpr (W == 1) {
    v[0] = load_f32(chunk.bits);
  } else {
    T packed[W];
    memcpy(packed, &chunk.bits, sizeof(chunk.bits));
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = load_f32(packed[k]);
  }
}

// v[0..W) = p[0..W) in fp32. W == kVec<T> needs p 16-byte aligned; W == 1 needs nothing.
template <int W, typename T>
__device__ __forceinline__ void load_f32_vec(float (&v)[W], const T* p) {
  widen<W>(v, load_packed<W>(p));
}

// p[0..W) = v[0..W) rounded to T; same alignment rule as load_f32_vec.
template <int W, typename T>
__device__ __forceinline__ void store_f32_vec(T* p, const float (&v)[W]) {
  static_assert(W == 1 || W * sizeof(T) == 16, "a width is 1 or 16 bytes");
  if constexpr (W == 1) {
    p[0] = store_as<T>(v[0]);
  } else {
    T packed[W];
#pragma unroll
    for (int k = 0; k < W; k++) packed[k] = store_as<T>(v[k]);
    int4 bits;
    memcpy(&bits, packed, sizeof(bits));
    *reinterpret_cast<int4*>(p) = bits;
  }
}

}  // namespace tessera::cuda
