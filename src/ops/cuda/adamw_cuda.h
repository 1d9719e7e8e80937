// CUDA launchers of the fused AdamW update (contract in ops/adamw.h).
// Raw device pointers, fp32 parameters and state, queued on `stream`; each checks its launches.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/adamw_element.h"

namespace tessera::cuda {

// One step over n elements of param, grad, m, v.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWElementParams& p,
                  cudaStream_t stream);
// One step of every segment (decayed ones with `decayed`, the others with `plain`), a launch per
// segment. T: the mirror's type, __nv_bfloat16 or __half (each updated parameter is also stored
// there, rounded); float means no mirror (pass null). M: the moments' type, float or __nv_bfloat16
// (stochastically rounded by the segments' rounding keys). Instantiated for those six pairs.
template <typename T, typename M>
void adamw_update_segments(float* param, const float* grad, M* m, M* v, T* mirror, const AdamWSegment* segments,
                           int64_t count, const AdamWElementParams& decayed, const AdamWElementParams& plain,
                           cudaStream_t stream);

}  // namespace tessera::cuda
