// Causal multi-head self-attention, flash style: no (B,NH,T,T) tensor is kept. Forward saves the
// row log-sum-exp of the scaled scores; backward recomputes one head's (T,T) probabilities at a time.
//   qkv (B,T,3C) packs [q | k | v], each split into NH heads of HS = C/NH channels.
//   forward:  out (B,T,C) = softmax(q k^T / sqrt(HS) + causal mask) v, heads concatenated; lse (B,NH,T).
//   backward: dqkv (B,T,3C) written, from dout (B,T,C), qkv, out and lse.
// qkv, out, dout and dqkv share one dtype: f32, or bf16 on the GPU (storage only, fp32 arithmetic);
// lse is f32 in both. On the CPU bf16 is refused.
#pragma once

#include "core/tensor.h"

namespace tessera {

void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads);
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int num_heads);

}  // namespace tessera
