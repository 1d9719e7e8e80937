// Document masking of packed training windows: which document each token of a window belongs to.
// Our shards start every document with the tokenizer's document start token (BOS, or <|endoftext|>),
// so a new document begins at each position whose input token is that token (and at position 0). A
// token's document start is the position where its document began: attention then sees only keys
// from there on (ops/attention.h), as Megatron's --reset-attention-mask and torchtitan's block-causal
// mask do.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera {

// starts (B,T) i32 on the host, from inputs (B,T) i32 on the host: starts[b,t] = the last position
// s <= t with inputs[b,s] == start_token, or 0 when there is none.
Tensor document_starts(const Tensor& inputs, int32_t start_token);

}  // namespace tessera
