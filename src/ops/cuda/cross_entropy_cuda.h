// CUDA launchers of the fused softmax + cross-entropy (contract in ops/cross_entropy.h).
// Raw device pointers, logits fp32 or bf16 (arithmetic fp32), losses fp32, queued on `stream`; each
// checks its launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// losses (N) from logits (N,Vp) over the first V columns and targets (N) in [0,V). With dloss != 0
// logits is overwritten with dloss * (softmax - onehot), padding columns 0.
void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                           float dloss, cudaStream_t stream);
void softmax_cross_entropy(float* losses, __nv_bfloat16* logits, const int32_t* targets, int64_t N, int64_t V,
                           int64_t Vp, float dloss, cudaStream_t stream);

}  // namespace tessera::cuda
