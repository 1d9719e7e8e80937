// CUDA launchers of causal self-attention, flash style (contract in ops/attention.h).
// Raw device pointers, 16-byte aligned, queued on `stream`; each checks its launches. Storage T =
// float, __nv_bfloat16 or __half for qkv, out, dout and dqkv alike (arithmetic fp32); lse is fp32 in
// all. Head sizes HS = C/NH in {16, 32, 48, 64, 80, 96, 128} (bf16 and f16 at 32, 64, 128 are the
// tensor-core kernels', attention_tc_cuda.h, and not built here): any other, or a misaligned pointer,
// throws tessera::Error before anything is queued. qkv packs NH query heads, then NKV key and NKV value
// heads (NKV divides NH; NKV < NH is grouped-query attention): (B, T, (NH + 2 NKV) HS), dqkv alike.
// No (T,T) matrix is stored; the backward is deterministic (no atomics). doc_starts: null (plain causal)
// or device i32 (B,T), each token's document start (ops/attention.h): query t sees keys [doc_starts[t], t].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// out (B,T,C = NH HS) and lse (B,NH,T), the natural-log row log-sum-exp of the scaled scores, from qkv.
template <typename Elem>
void attention_forward(Elem* out, float* lse, const Elem* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV, const int32_t* doc_starts, cudaStream_t stream);
// dqkv written, from dout (B,T,C), qkv, out (B,T,C) and lse (B,NH,T). Uses a (B,NH,T) fp32 scratch
// from the device allocator, so `stream` must be the compute stream.
template <typename Elem>
void attention_backward(Elem* dqkv, const Elem* dout, const Elem* qkv, const Elem* out, const float* lse, int64_t B,
                        int64_t T, int64_t C, int64_t NH, int64_t NKV, const int32_t* doc_starts,
                        cudaStream_t stream);

}  // namespace tessera::cuda
