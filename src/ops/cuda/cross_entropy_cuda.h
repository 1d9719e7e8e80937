// CUDA launchers of the fused softmax + cross-entropy (contract in ops/cross_entropy.h).
// Raw device pointers, logits of storage T = float, __nv_bfloat16 or __half (arithmetic fp32),
// losses fp32, queued on `stream`; each checks its launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// losses (N) from logits (N,Vp) over the first V columns and targets (N) in [0,V) or kIgnoredTarget
// (loss 0). With dloss != 0 logits is overwritten with dloss * (softmax - onehot), padding columns 0,
// an ignored target's row all 0.
template <typename T>
void softmax_cross_entropy(float* losses, T* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                           float dloss, cudaStream_t stream);

}  // namespace tessera::cuda
