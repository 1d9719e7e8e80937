// Transformer block forward and backward: norms, attention, MLP and the two residual adds, the norms
// before the sublayers (pre) or after them (post, OLMo 2).
#include "nn/decoder_block.h"

#include "ops/residual.h"

namespace tessera {

void BlockActivations::allocate(const ModelConfig& config, int64_t layer, int64_t B, int64_t T, int64_t T_local,
                                DType dtype, Device device, const BlockActivations* selective) {
  const bool own = selective == nullptr;
  norm1.allocate(config, B, T_local, dtype, device);
  attn.allocate(config, B, T, T_local, dtype, device, own);
  mid = Tensor::zeros({B, T_local, config.channels}, dtype, device);
  norm2.allocate(config, B, T_local, dtype, device);
  if (config.is_moe_block(layer))
    moe.allocate(config, B, T, T_local, dtype, device, own);
  else
    mlp.allocate(config.mlp, B, T, T_local, config.channels, config.hidden(), dtype, device, own);
  out = Tensor::zeros({B, T_local, config.channels}, dtype, device);
  if (own) return;
  attn.core = selective->attn.core;
  attn.lse = selective->attn.lse;
  attn.latent.values = selective->attn.latent.values;
  mlp.act = selective->mlp.act;
  moe.act = selective->moe.act;
}

namespace {

bool post_norms(const ModelConfig& config) { return config.norm_placement == NormPlacement::post; }

// The block's MLP, dense or MoE as its weights say, on `input`.
void mlp_forward(const ModelConfig& config, const MoeOptions& moe, BlockActivations& a, const Tensor& input,
                 const BlockWeights& w, BlockContext ctx) {
  if (w.router.defined())
    moe_layer_forward(config, moe, a.moe, input, w, ctx.tp, ctx.ep, ctx.cp, ctx.fp8);
  else
    mlp_layer_forward(config.mlp, a.mlp, input, w.mlp_in, w.mlp_out, ctx.tp, ctx.fp8);
}

// Its backward from dout: dinput written, parameter gradients accumulated.
void mlp_backward(const ModelConfig& config, MoeLossScales moe, Tensor& dinput, BlockWeights& g, const Tensor& dout,
                  const BlockActivations& a, const Tensor& input, const BlockWeights& w, BlockScratch& scratch,
                  DeferredWeightGrads* deferred, BlockContext ctx) {
  if (w.router.defined())
    moe_layer_backward(config, dinput, g, dout, a.moe, input, w, moe, scratch.moe, deferred, ctx.tp, ctx.ep, ctx.cp,
                       ctx.fp8);
  else
    mlp_layer_backward(config.mlp, dinput, g.mlp_in, g.mlp_out, dout, a.mlp, input, w.mlp_in, w.mlp_out, scratch.mlp,
                       deferred, ctx.tp, ctx.fp8);
}

// OLMo 2's order: mid = x + norm1(attention(x)), out = mid + norm2(mlp(mid)); `next` as block_forward's.
void post_norm_block_forward(const ModelConfig& config, const MoeOptions& moe, BlockActivations& a, const Tensor& x,
                             const BlockWeights& w, const SequencePositions& seq, NextNorm next, BlockContext ctx) {
  attention_layer_forward(config, a.attn, x, w, seq, ctx.tp, ctx.cp, ctx.fp8);
  norm_forward(config, a.norm1, a.attn.out, w.norm1);
  residual_forward(a.mid, x, a.norm1.out);
  mlp_forward(config, moe, a, a.mid, w, ctx);
  norm_forward(config, a.norm2, a.mlp_out(), w.norm2);
  if (next.acts)
    residual_norm_forward(config, a.out, *next.acts, a.mid, a.norm2.out, *next.weights);
  else
    residual_forward(a.out, a.mid, a.norm2.out);
}

// Its backward: each sublayer's branch gradient (through its norm) in scratch.dbranch, the sublayer's
// input gradient in scratch.dnormed, added to the residual stream's.
void post_norm_block_backward(const ModelConfig& config, MoeLossScales moe, Tensor& dres, BlockWeights& g,
                              const BlockActivations& a, const Tensor& x, const BlockWeights& w,
                              const SequencePositions& seq, BlockScratch& scratch, DeferredWeightGrads* deferred,
                              BlockContext ctx) {
  norm_backward(config, scratch.dbranch, g.norm2, dres, a.mlp_out(), w.norm2, a.norm2);
  mlp_backward(config, moe, scratch.dnormed, g, scratch.dbranch, a, a.mid, w, scratch, deferred, ctx);
  add_inplace(dres, scratch.dnormed);
  norm_backward(config, scratch.dbranch, g.norm1, dres, a.attn.out, w.norm1, a.norm1);
  attention_layer_backward(config, scratch.dnormed, g, scratch.dbranch, a.attn, x, w, seq, scratch.attn, deferred,
                           ctx.tp, ctx.cp, ctx.fp8);
  add_inplace(dres, scratch.dnormed);
}

}  // namespace

void block_forward(const ModelConfig& config, const MoeOptions& moe, BlockActivations& a, const Tensor& x,
                   const BlockWeights& w, const SequencePositions& seq, NextNorm next, BlockContext ctx) {
  if (post_norms(config)) return post_norm_block_forward(config, moe, a, x, w, seq, next, ctx);
  attention_layer_forward(config, a.attn, a.norm1.out, w, seq, ctx.tp, ctx.cp, ctx.fp8);
  residual_norm_forward(config, a.mid, a.norm2, x, a.attn.out, w.norm2);
  mlp_forward(config, moe, a, a.norm2.out, w, ctx);
  if (next.acts)
    residual_norm_forward(config, a.out, *next.acts, a.mid, a.mlp_out(), *next.weights);
  else
    residual_forward(a.out, a.mid, a.mlp_out());
}

void block_decode(const ModelConfig& config, BlockActivations& a, const Tensor& x, const BlockWeights& w,
                  const SequencePositions& seq, Tensor& k_cache, Tensor& v_cache, int64_t past) {
  const bool post = post_norms(config);
  if (!post) norm_forward(config, a.norm1, x, w.norm1);
  attention_layer_decode(config, a.attn, post ? x : a.norm1.out, w, seq, k_cache, v_cache, past);
  if (post) {
    norm_forward(config, a.norm1, a.attn.out, w.norm1);
    residual_forward(a.mid, x, a.norm1.out);
  } else {
    residual_norm_forward(config, a.mid, a.norm2, x, a.attn.out, w.norm2);
  }
  mlp_forward(config, MoeOptions{}, a, post ? a.mid : a.norm2.out, w, {});  // inference is dropless
  if (post) norm_forward(config, a.norm2, a.mlp_out(), w.norm2);
  residual_forward(a.out, a.mid, post ? a.norm2.out : a.mlp_out());
}

void block_recompute(const ModelConfig& config, Recompute mode, const MoeOptions& moe, BlockActivations& a,
                     const Tensor& x, const BlockWeights& w, const SequencePositions& seq, BlockContext ctx) {
  if (mode == Recompute::full) {
    if (!post_norms(config)) norm_forward(config, a.norm1, x, w.norm1);
    return block_forward(config, moe, a, x, w, seq, NextNorm{}, ctx);
  }
  attention_core_recompute(config, a.attn, seq, ctx.cp);
  if (w.router.defined())
    moe_activation_recompute(a.moe);
  else
    mlp_activation_recompute(config.mlp, a.mlp);
}

void block_backward(const ModelConfig& config, MoeLossScales moe, Tensor& dres, BlockWeights& g,
                    const BlockActivations& a, const Tensor& x, const BlockWeights& w, const SequencePositions& seq,
                    BlockScratch& scratch, DeferredWeightGrads* deferred, BlockContext ctx) {
  if (post_norms(config))
    return post_norm_block_backward(config, moe, dres, g, a, x, w, seq, scratch, deferred, ctx);
  mlp_backward(config, moe, scratch.dnormed, g, dres, a, a.norm2.out, w, scratch, deferred, ctx);
  norm_backward(config, dres, g.norm2, scratch.dnormed, a.mid, w.norm2, a.norm2, GradInto::add);
  attention_layer_backward(config, scratch.dnormed, g, dres, a.attn, a.norm1.out, w, seq, scratch.attn, deferred,
                           ctx.tp, ctx.cp, ctx.fp8);
  norm_backward(config, dres, g.norm1, scratch.dnormed, x, w.norm1, a.norm1, GradInto::add);
}

}  // namespace tessera
