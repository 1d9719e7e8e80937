// CUDA launchers of the attention-block op (contract in ops/attention_block.h), the steps of ring
// attention on the GPU. Storage T = float, __nv_bfloat16 or __half for qkv, out, dout and dqkv; the kv
// block, its gradient dkv, lse and delta are fp32 (kv crosses the ring and dkv sums over it without
// rounding). Positions are device i32 arrays, strictly increasing. Raw device pointers, queued on
// `stream`; head sizes up to kMaxBlockHeadSize (the launchers throw before queueing otherwise). CUDA
// cores, a block per row: correct and deterministic, not yet fast.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

constexpr int64_t kMaxBlockHeadSize = 256;

struct BlockShape {
  int64_t B, Tq, Tk, NH, NKV, HS;
  const int32_t *q_pos, *kv_pos;  // device, (Tq) and (Tk)
  // Null, or device (B,Tq): the true position of each query's document start; query p then sees the
  // keys at positions [q_doc_starts[b, i], p] only (ops/attention_block.h).
  const int32_t* q_doc_starts = nullptr;
};

template <typename T>
void attention_block_forward(T* out, float* lse, const T* qkv, const float* kv, const BlockShape& s, bool first,
                             cudaStream_t stream);
template <typename T>
void attention_block_delta(float* delta, const T* dout, const T* out, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                           cudaStream_t stream);
template <typename T>
void attention_block_backward(T* dqkv, float* dkv, const T* dout, const T* qkv, const float* kv, const float* lse,
                              const float* delta, const BlockShape& s, cudaStream_t stream);
// kv (B,T,2*NKV*HS) fp32 = the k and v channels of qkv (B,T,(NH+2NKV)*HS); and back, dkv into dqkv's
// k and v channels (rounded to T), q untouched.
template <typename T>
void attention_block_kv(float* kv, const T* qkv, int64_t rows, int64_t NH, int64_t NKV, int64_t HS,
                        cudaStream_t stream);
template <typename T>
void attention_block_kv_to_qkv(T* dqkv, const float* dkv, int64_t rows, int64_t NH, int64_t NKV, int64_t HS,
                               cudaStream_t stream);

}  // namespace tessera::cuda
