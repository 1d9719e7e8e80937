// CUDA launchers of causal self-attention in bf16 or fp16 (E = __nv_bfloat16 or __half) on tensor
// cores (mma.sync, sm_80+), FlashAttention-2 style; the contract of ops/attention.h, the same results as
// attention_cuda.h's launchers of the same type up to rounding (P and dS enter their products in E;
// accumulation is fp32). Raw device pointers, queued on `stream`. Head sizes HS = C/NH in {32, 64, 128}
// and 16-byte aligned pointers only: ask attention_tc_supported first and fall back to attention_cuda.h
// otherwise (the launchers throw tessera::Error before queueing anything). qkv packs NH query, NKV key and
// NKV value heads, (B, T, (NH + 2 NKV) HS), as in attention_cuda.h. No (T,T) matrix is stored; the
// backward is deterministic. doc_starts: null (plain causal) or device i32 (B,T), each token's document
// start (ops/attention.h): query t sees keys [doc_starts[t], t].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

namespace tessera::cuda {

// True when the tensor-core kernels cover head size HS, every pointer is 16-byte aligned and the current
// device has compute capability 8.0 or newer.
bool attention_tc_supported(int64_t HS, std::initializer_list<const void*> pointers);

// out (B,T,C = NH HS) and lse (B,NH,T), the natural-log row log-sum-exp of the scaled scores, from qkv.
template <typename E>
void attention_tc_forward(E* out, float* lse, const E* qkv, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                          const int32_t* doc_starts, cudaStream_t stream);
// dqkv written, from dout (B,T,C), qkv, out (B,T,C) and lse (B,NH,T). Uses a (B,NH,T) fp32 scratch from
// the device allocator, so `stream` must be the compute stream.
template <typename E>
void attention_tc_backward(E* dqkv, const E* dout, const E* qkv, const E* out, const float* lse, int64_t B, int64_t T,
                           int64_t C, int64_t NH, int64_t NKV, const int32_t* doc_starts, cudaStream_t stream);

}  // namespace tessera::cuda
