// One transformer block, pre-norm:
//   mid = x + attention(norm1(x));   out = mid + mlp(norm2(mid))
// norm1(x) is computed before forward() (by the previous block's fused add, or by the decoder for
// block 0), and forward() fuses its last add with the norm that reads `out` when it is given one
// (the next block's norm1, or the final norm). backward() takes the gradient of `out` in dres and
// leaves the gradient of x there; parameter gradients accumulate.
#pragma once

#include "nn/attention_layer.h"
#include "nn/decoder_layout.h"
#include "nn/mlp_layer.h"
#include "nn/model_config.h"
#include "nn/norm_layer.h"

namespace tessera {

struct BlockActivations {
  NormActivations norm1;
  AttentionActivations attn;
  Tensor mid;  // (B,T,C): x + attention
  NormActivations norm2;
  MlpActivations mlp;
  Tensor out;  // (B,T,C): the block's output, the next block's input
  void allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device);
};

// Backward scratch shared by every block: dnormed and dnorm (B,T,C) plus the layers' own.
struct BlockScratch {
  Tensor dnormed, dnorm;
  AttentionScratch attn;
  MlpScratch mlp;
};

// The norm that reads a block's output, fused with its last add.
struct NextNorm {
  NormActivations* acts = nullptr;  // null: no fusion (out = mid + mlp)
  const LinearWeights* weights = nullptr;
};

void block_forward(const ModelConfig& config, BlockActivations& a, const Tensor& x,
                   const BlockWeights& w, const Rotary& rotary, NextNorm next);
void block_backward(const ModelConfig& config, Tensor& dres, BlockWeights& g,
                    const BlockActivations& a, const Tensor& x, const BlockWeights& w, const Rotary& rotary,
                    BlockScratch& scratch);

}  // namespace tessera
