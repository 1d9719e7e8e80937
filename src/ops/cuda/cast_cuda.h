// CUDA launchers of the f32 <-> bf16 / fp16 conversion (contract in ops/cast.h); queued on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// dst (n) = src (n) converted; one of To, From is float, the other __nv_bfloat16 or __half.
template <typename To, typename From> void cast_copy(To* dst, const From* src, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda
