// Vector loads and stores for kernels templated on the storage type T (float, __nv_bfloat16, __half):
// kVec<T> consecutive elements (16 bytes) move in one instruction and are widened to / rounded from
// fp32 registers. A kernel taking a width W runs the same code with W = 1 (scalar, any alignment)
// or W = kVec<T> (pointers 16-byte aligned, run lengths multiples of W); launchers pick with
// is_aligned16. Included by .cu files only.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/cuda/cuda_common.cuh"

namespace tessera::cuda {

// Elements of T in 16 bytes: 4 floats, 8 bf16 or fp16.
template <typename T> constexpr int kVec = int(16 / sizeof(T));

inline bool is_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// v[0..W) = p[0..W) in fp32. W == kVec<T> needs p 16-byte aligned; W == 1 needs nothing.
template <int W, typename T>
__device__ __forceinline__ void load_f32_vec(float (&v)[W], const T* p) {
  static_assert(W == 1 || W * sizeof(T) == 16, "a width is 1 or 16 bytes");
  if constexpr (W == 1) {
    v[0] = load_f32(p[0]);
  } else {
    const int4 bits = *reinterpret_cast<const int4*>(p);
    T packed[W];
    memcpy(packed, &bits, sizeof(bits));
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = load_f32(packed[k]);
  }
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
