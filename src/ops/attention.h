// Causal self-attention, multi-head or grouped-query, flash style: no (B,NH,T,T) tensor is kept.
// Forward saves the row log-sum-exp of the scaled scores; backward recomputes one head's (T,T)
// probabilities at a time.
//   qkv (B, T, (NH + 2*NKV) * HS) packs per token [q (NH heads) | k (NKV heads) | v (NKV heads)], each
//   head HS contiguous channels (the layout rope_forward rotates). Query head h attends with kv head
//   h / (NH / NKV); NKV divides NH. NKV == NH is multi-head attention, qkv (B,T,3C) with C = NH*HS.
//   forward:  out (B,T,NH*HS) = softmax(q k^T / sqrt(HS) + causal mask) v, heads concatenated; lse (B,NH,T).
//   backward: dqkv (like qkv) written (=), from dout (B,T,NH*HS), qkv, out and lse; dk and dv of a kv
//             head are the sums over the NH / NKV query heads of its group.
// qkv, out, dout and dqkv share one dtype: f32, or bf16 on the GPU (storage only, fp32 arithmetic);
// lse is f32 in both. On the CPU bf16 is refused. On the GPU, bf16 and f16 run on Tessera's tensor-core
// kernels or, when set_attention_kernel(AttentionKernel::cudnn) chose it, on cuDNN's fused attention.
// Document masking (packed sequences) and sliding windows: with doc_starts (B,T) i32 on qkv's device,
// doc_starts[b,t] is the first key token t sees (its document's first token, or under a sliding window of
// W the later t - W + 1), and query t sees keys [doc_starts[b,t], t] only. Along each sequence the entries
// never decrease and each lies in [0, t]; the CPU checks this, the GPU does not read them back.
// Undefined: plain causal.
// Soft-capped scores (Gemma 2's attn_logit_softcapping): with softcap > 0 each scaled score s becomes
// softcap * tanh(s / softcap) before the mask and the softmax, and the backward carries dS through its
// derivative 1 - tanh^2 (the lse is the capped scores'). CPU only: the GPU kernels refuse it.
// cuDNN's kernel does not take them; a masked call runs on Tessera's kernels. Every kernel's backward gives
// the same bits every run, except cuDNN's when deterministic_kernels() is off (ops/deterministic_kernels.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/tensor.h"

namespace tessera {

// Which kernels run GPU attention in bf16 and f16, process-wide: Tessera's own tensor-core kernels or
// cuDNN's fused flash attention, where it covers the case (HS a multiple of 8 up to 128, 16-byte aligned
// tensors, no document mask); elsewhere, and for f32 and the CPU, the choice changes nothing. automatic
// (the default) takes cuDNN where this build has it, it covers the call, its release has no known
// fused-attention bug and its backward's workspace stays within kCudnnAttentionWorkspaceLimit (faster on
// an H100: 486k against 460k tok/s for GPT-2 124M), else Tessera's.
enum class AttentionKernel { automatic, tessera, cudnn };
// Throws when asked for cudnn in a build without cuDNN.
void set_attention_kernel(AttentionKernel kernel);
AttentionKernel attention_kernel();
// "auto", "tessera" or "cudnn"; any other name throws, listing these.
AttentionKernel parse_attention_kernel(std::string_view name);
std::string_view attention_kernel_name(AttentionKernel kernel);

// The scratch cuDNN's backward takes for B sequences of T tokens, NH query heads of HS channels.
// Deterministic, its workspace keeps dS for the separate dq product: B·NH·T² 16-bit values (T rounded
// up to 64), quadratic in the sequence. Otherwise (deterministic_kernels() off) only the fp32 dq
// accumulator, B·NH·T·HS floats.
int64_t cudnn_attention_workspace_bytes(int64_t B, int64_t NH, int64_t T, int64_t HS, bool deterministic);
// Above this, automatic leaves cuDNN for Tessera's kernels, which hold no T×T matrix (GPT-2 124M at
// micro-batch 64 needs 1.5 GiB; Llama 3 8B at one 8,192-token sequence 4 GiB).
constexpr int64_t kCudnnAttentionWorkspaceLimit = int64_t(2) << 30;
// Whether `kernel` lets cuDNN run a call whose backward needs `workspace` bytes (cuDNN covering it):
// cudnn always, automatic within the limit, tessera never.
bool cudnn_attention_allowed(AttentionKernel kernel, int64_t workspace);
// Who runs a 16-bit GPU attention call of B sequences of T tokens, NH query heads of HS channels, under
// the current choice and setting (cudnn or tessera, aligned tensors assumed), as the ops decide it: for
// reports. tessera in a build without cuDNN or off the GPU.
AttentionKernel attention_kernel_for(int64_t B, int64_t NH, int64_t T, int64_t HS, bool document_mask);

// num_kv_heads = 0 means num_heads (multi-head attention); softcap 0: scores not capped.
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads, int num_kv_heads = 0,
                       const Tensor& doc_starts = {}, float softcap = 0.0f);
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int num_heads, int num_kv_heads = 0, const Tensor& doc_starts = {}, float softcap = 0.0f);

namespace detail {

struct AttentionDims {
  int64_t B, T, C, NH, NKV;  // C = NH * HS: the width of q, out and dout
  int64_t head_size() const { return C / NH; }
};

// The dimensions of qkv (B, T, (NH + 2*NKV) * HS), checked against the head counts; throws naming `op`.
// num_kv_heads = 0 means num_heads (multi-head attention). Shared with the attention-block op.
AttentionDims attention_dims(const char* op, const Tensor& qkv, int num_heads, int num_kv_heads);

// doc_starts (B,T) i32 when defined; on the CPU also its contents: each entry lies between the one before
// it (0 before the first) and its token's position (t, or with `positions` the attention-block op's true
// position of a context-parallel share's token).
void check_doc_starts(const char* op, const Tensor& doc_starts, int64_t B, int64_t T,
                      std::span<const int32_t> positions = {});

}  // namespace detail

}  // namespace tessera
