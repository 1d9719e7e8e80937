// CUDA launchers of the f32 <-> bf16 conversion (contract in ops/cast.h); queued on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

void cast_copy(__nv_bfloat16* dst, const float* src, int64_t n, cudaStream_t stream);
void cast_copy(float* dst, const __nv_bfloat16* src, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda
