// Typed device pointers of a tensor for the CUDA launchers, which take float* or __nv_bfloat16*
// (cuda_bf16.h's type, layout-identical to tessera::bf16). A plain C++ header for src/ops/*.cpp.
#pragma once

#include <cuda_bf16.h>

#include "core/tensor.h"

namespace tessera::cuda {

inline __nv_bfloat16* bf16_data(Tensor& t) { return reinterpret_cast<__nv_bfloat16*>(t.data<bf16>()); }
inline const __nv_bfloat16* bf16_data(const Tensor& t) {
  return reinterpret_cast<const __nv_bfloat16*>(t.data<bf16>());
}

}  // namespace tessera::cuda
