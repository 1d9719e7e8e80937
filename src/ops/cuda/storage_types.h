// The GPU's storage types, for the op front ends in src/ops/*.cpp: the CUDA launchers are templates
// over T = float, __nv_bfloat16 or __half (cuda_bf16.h's and cuda_fp16.h's types, layout-identical to
// tessera::bf16 and tessera::f16). with_storage_type calls a generic lambda with the T of a dtype;
// typed_data gives a tensor's device pointer as T*. A plain C++ header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"

namespace tessera::cuda {

template <typename T> constexpr DType storage_dtype() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::bf16;
  else if constexpr (std::is_same_v<T, __half>) return DType::f16;
  else return DType::f32;
}

template <typename T> T* typed_data(Tensor& t) {
  TS_CHECK(t.dtype() == storage_dtype<T>(), "typed_data: tensor is ", dtype_name(t.dtype()), ", not ",
           dtype_name(storage_dtype<T>()));
  return static_cast<T*>(t.raw_data());
}
template <typename T> const T* typed_data(const Tensor& t) { return typed_data<T>(const_cast<Tensor&>(t)); }

// fn(T{}) for the storage type of `dtype` (f32, bf16 or f16; checked by the op before).
template <typename Fn> decltype(auto) with_storage_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::bf16: return fn(__nv_bfloat16{});
    case DType::f16: return fn(__half{});
    default: return fn(float{});
  }
}

}  // namespace tessera::cuda
