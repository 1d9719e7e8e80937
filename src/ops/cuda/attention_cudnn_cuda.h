// CUDA launchers of causal self-attention in bf16 or fp16 (E = __nv_bfloat16 or __half) through cuDNN 9's
// fused flash-attention engines (backend graph API, cudnn_graph.h): the contract of ops/attention.h and of
// attention_tc_cuda.h, the same packed qkv (B, T, (NH + 2 NKV) HS) read in place through strides, out
// (B,T,C = NH HS), lse (B,NH,T) the natural-log log-sum-exp of the scaled scores (cuDNN's softmax stats),
// grouped-query attention when NKV < NH. Head sizes HS a multiple of 8 up to 128 and 16-byte aligned
// pointers only: ask attention_cudnn_supported first (the launchers throw before queueing anything).
// Graphs are planned once per (dtype, B, T, NH, NKV, HS, direction, dq form) and cached. A deterministic
// backward asks for engines without cuDNN's NONDETERMINISTIC note and writes dq directly (cuDNN keeps dS in
// its workspace and multiplies it by K in a second kernel); otherwise the fused kernel adds dq into a
// zeroed fp32 accumulator with atomics (one kernel fewer, last bits varying from run to run). Only in builds with TESSERA_WITH_CUDNN. A failure throws tessera::Error
// naming the graph node, attribute and cuDNN's message; CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr adds
// cuDNN's own log.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

namespace tessera::cuda {

// True when cuDNN's fused attention covers head size HS (a multiple of 8, at most 128), every pointer is
// 16-byte aligned and the current device has compute capability 8.0 or newer.
bool attention_cudnn_supported(int64_t HS, std::initializer_list<const void*> pointers);
// False for the cuDNN releases with known fused-attention bugs (9.10.0, 9.10.1), which the launchers refuse.
bool attention_cudnn_release_usable();

// out (B,T,C = NH HS) and lse (B,NH,T) from qkv. Uses a workspace from the device allocator, so `stream`
// must be the compute stream.
template <typename E>
void attention_cudnn_forward(E* out, float* lse, const E* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                             int64_t NKV, cudaStream_t stream);
// dqkv written, from dout (B,T,C), qkv, out (B,T,C) and lse (B,NH,T); the same bits every run when
// `deterministic`. Workspace, a (B,NH,T) fp32 scratch and (not deterministic) a (B,NH,T,HS) fp32
// accumulator from the device allocator, so `stream` must be the compute stream.
template <typename E>
void attention_cudnn_backward(E* dqkv, const E* dout, const E* qkv, const E* out, const float* lse, int64_t B,
                              int64_t T, int64_t C, int64_t NH, int64_t NKV, bool deterministic,
                              cudaStream_t stream);

}  // namespace tessera::cuda
