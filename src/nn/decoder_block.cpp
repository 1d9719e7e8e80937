// Transformer block forward and backward: norms, attention, MLP and the two residual adds.
#include "nn/decoder_block.h"

#include "ops/residual.h"

namespace tessera {

void BlockActivations::allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device) {
  norm1.allocate(config, B, T, dtype, device);
  attn.allocate(config, B, T, dtype, device);
  mid = Tensor::zeros({B, T, config.channels}, dtype, device);
  norm2.allocate(config, B, T, dtype, device);
  mlp.allocate(config.mlp, B, T, config.channels, config.hidden(), dtype, device);
  out = Tensor::zeros({B, T, config.channels}, dtype, device);
}

void block_forward(const ModelConfig& config, BlockActivations& a, const Tensor& x,
                   const BlockWeights& w, const Rotary& rotary, NextNorm next) {
  attention_layer_forward(config, a.attn, a.norm1.out, w, rotary);
  residual_norm_forward(config, a.mid, a.norm2, x, a.attn.out, w.norm2);
  mlp_layer_forward(config.mlp, a.mlp, a.norm2.out, w.mlp_in, w.mlp_out);
  if (next.acts)
    residual_norm_forward(config, a.out, *next.acts, a.mid, a.mlp.out, *next.weights);
  else
    residual_forward(a.out, a.mid, a.mlp.out);
}

void block_backward(const ModelConfig& config, Tensor& dres, BlockWeights& g,
                    const BlockActivations& a, const Tensor& x, const BlockWeights& w, const Rotary& rotary,
                    BlockScratch& scratch) {
  mlp_layer_backward(config.mlp, scratch.dnormed, g.mlp_in, g.mlp_out, dres, a.mlp, a.norm2.out, w.mlp_in, w.mlp_out,
                     scratch.mlp);
  norm_backward(config, scratch.dnorm, g.norm2, scratch.dnormed, a.mid, w.norm2, a.norm2);
  add_inplace(dres, scratch.dnorm);
  attention_layer_backward(config, scratch.dnormed, g, dres, a.attn, a.norm1.out, w, rotary, scratch.attn);
  norm_backward(config, scratch.dnorm, g.norm1, scratch.dnormed, x, w.norm1, a.norm1);
  add_inplace(dres, scratch.dnorm);
}

}  // namespace tessera
