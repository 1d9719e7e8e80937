// CUDA launcher of attention over a key/value cache (contract in ops/attention_kv.h): the new tokens'
// keys and values appended to the caches, then each query row attends over its visible cache rows.
// Raw device pointers of storage T = float, __nv_bfloat16 or __half (arithmetic fp32), queued on
// `stream`. Head sizes up to kMaxKvHeadSize; the launcher throws tessera::Error before queueing
// anything otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

constexpr int64_t kMaxKvHeadSize = 256;

template <typename T>
void attention_kv_forward(T* out, T* k_cache, T* v_cache, const T* qkv, int64_t B, int64_t Tq, int64_t past,
                          int64_t capacity, int64_t NH, int64_t NKV, int64_t HS, int64_t window, cudaStream_t stream);

}  // namespace tessera::cuda
