// Transformer block forward and backward: norms, attention, MLP and the two residual adds, the norms
// before the sublayers (pre), after them (post, OLMo 2) or both (sandwich, Gemma), the sublayers one
// after the other or side by side (a parallel residual, GPT-NeoX).
#include "nn/decoder_block.h"

#include "ops/residual.h"

namespace tessera {

void BlockActivations::allocate(const ModelConfig& config, int64_t layer, int64_t B, int64_t T, int64_t T_local,
                                DType dtype, Device device, const BlockActivations* selective) {
  const bool own = selective == nullptr;
  const bool pre = has_pre_norms(config.norm_placement), post = has_post_norms(config.norm_placement);
  if (pre) norm1.allocate(config, B, T_local, dtype, device);
  attn.allocate(config, B, T, T_local, dtype, device, own);
  if (post) norm1_post.allocate(config, B, T_local, dtype, device);
  mid = Tensor::zeros({B, T_local, config.channels}, dtype, device);
  if (pre && !config.shared_norm) norm2.allocate(config, B, T_local, dtype, device);
  if (config.is_moe_block(layer))
    moe.allocate(config, B, T, T_local, dtype, device, own);
  else
    mlp.allocate(config.mlp, B, T, T_local, config.channels, config.hidden(), dtype, device, own);
  if (post) norm2_post.allocate(config, B, T_local, dtype, device);
  out = Tensor::zeros({B, T_local, config.channels}, dtype, device);
  if (own) return;
  attn.core = selective->attn.core;
  attn.lse = selective->attn.lse;
  attn.latent.values = selective->attn.latent.values;
  mlp.act = selective->mlp.act;
  moe.act = selective->moe.act;
}

namespace {

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

// What a sublayer's branch adds to the residual stream: its output, or that output's norm (post-norm).
const Tensor& branch_out(const ModelConfig& config, const Tensor& out, NormActivations& post,
                         const LinearWeights& w) {
  if (!has_post_norms(config.norm_placement)) return out;
  norm_forward(config, post, out, w);
  return post.out;
}

// The gradient of a sublayer's output from that of its branch (dbranch): through its post norm into
// `scratch`, or dbranch itself.
const Tensor& sublayer_out_grad(const ModelConfig& config, const Tensor& dbranch, Tensor& scratch, LinearWeights& g,
                                const Tensor& out, const LinearWeights& w, const NormActivations& post) {
  if (!has_post_norms(config.norm_placement)) return dbranch;
  norm_backward(config, scratch, g, dbranch, out, w, post);
  return scratch;
}

// The residual stream's gradient gains the sublayer input's (dinput): through the pre norm that made the
// input from `x`, or as it is.
void add_input_grad(const ModelConfig& config, Tensor& dres, LinearWeights& g, const Tensor& dinput, const Tensor& x,
                    const LinearWeights& w, const NormActivations& pre) {
  if (has_pre_norms(config.norm_placement)) return norm_backward(config, dres, g, dinput, x, w, pre, GradInto::add);
  add_inplace(dres, dinput);
}

// A parallel residual's middle: mid = x + attention's branch, and the MLP's input norm2(x) (under a shared norm,
// norm1(x), already there).
void parallel_mid(const ModelConfig& config, BlockActivations& a, const Tensor& x, const BlockWeights& w) {
  residual_forward(a.mid, x, a.attn.out);
  if (!config.shared_norm) norm_forward(config, a.norm2, x, w.norm2);
}

// What the MLP reads: norm2's output (pre-norm and sandwich; norm1's under a shared norm), or mid (post-norm).
const Tensor& mlp_input(const ModelConfig& config, const BlockActivations& a) {
  if (config.shared_norm) return a.norm1.out;
  return has_pre_norms(config.norm_placement) ? a.norm2.out : a.mid;
}

}  // namespace

void block_forward(const ModelConfig& config, const MoeOptions& moe, BlockActivations& a, const Tensor& x,
                   const BlockWeights& w, const SequencePositions& seq, NextNorm next, BlockContext ctx) {
  const bool pre = has_pre_norms(config.norm_placement);
  attention_layer_forward(config, a.attn, pre ? a.norm1.out : x, w, seq, ctx.tp, ctx.cp, ctx.fp8);
  const Tensor& attn_branch = branch_out(config, a.attn.out, a.norm1_post, w.norm1_post);
  if (config.parallel_residual)
    parallel_mid(config, a, x, w);
  else if (pre)
    residual_norm_forward(config, a.mid, a.norm2, x, attn_branch, w.norm2);
  else
    residual_forward(a.mid, x, attn_branch);
  mlp_forward(config, moe, a, mlp_input(config, a), w, ctx);
  const Tensor& mlp_branch = branch_out(config, a.mlp_out(), a.norm2_post, w.norm2_post);
  if (next.acts)
    residual_norm_forward(config, a.out, *next.acts, a.mid, mlp_branch, *next.weights);
  else
    residual_forward(a.out, a.mid, mlp_branch);
}

void block_decode(const ModelConfig& config, BlockActivations& a, const Tensor& x, const BlockWeights& w,
                  const SequencePositions& seq, Tensor& k_cache, Tensor& v_cache, int64_t past) {
  const bool pre = has_pre_norms(config.norm_placement);
  if (pre) norm_forward(config, a.norm1, x, w.norm1);
  attention_layer_decode(config, a.attn, pre ? a.norm1.out : x, w, seq, k_cache, v_cache, past);
  const Tensor& attn_branch = branch_out(config, a.attn.out, a.norm1_post, w.norm1_post);
  if (config.parallel_residual)
    parallel_mid(config, a, x, w);
  else if (pre)
    residual_norm_forward(config, a.mid, a.norm2, x, attn_branch, w.norm2);
  else
    residual_forward(a.mid, x, attn_branch);
  mlp_forward(config, MoeOptions{}, a, mlp_input(config, a), w, {});  // inference is dropless
  residual_forward(a.out, a.mid, branch_out(config, a.mlp_out(), a.norm2_post, w.norm2_post));
}

void block_recompute(const ModelConfig& config, Recompute mode, const MoeOptions& moe, BlockActivations& a,
                     const Tensor& x, const BlockWeights& w, const SequencePositions& seq, BlockContext ctx) {
  if (mode == Recompute::full) {
    if (has_pre_norms(config.norm_placement)) norm_forward(config, a.norm1, x, w.norm1);
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
  const bool pre = has_pre_norms(config.norm_placement);
  if (config.parallel_residual) {
    // out = x + attention(norm1(x)) + mlp(norm2(x)): each sublayer's output takes dres as it is; both input
    // gradients join dres through their norms once both are taken (under a shared norm, summed through norm1).
    mlp_backward(config, moe, scratch.dbranch, g, dres, a, mlp_input(config, a), w, scratch, deferred, ctx);
    attention_layer_backward(config, scratch.dnormed, g, dres, a.attn, a.norm1.out, w, seq, scratch.attn, deferred,
                             ctx.tp, ctx.cp, ctx.fp8);
    if (config.shared_norm)
      add_inplace(scratch.dnormed, scratch.dbranch);
    else
      add_input_grad(config, dres, g.norm2, scratch.dbranch, x, w.norm2, a.norm2);
    add_input_grad(config, dres, g.norm1, scratch.dnormed, x, w.norm1, a.norm1);
    return;
  }
  const Tensor& dmlp_out =
      sublayer_out_grad(config, dres, scratch.dbranch, g.norm2_post, a.mlp_out(), w.norm2_post, a.norm2_post);
  mlp_backward(config, moe, scratch.dnormed, g, dmlp_out, a, mlp_input(config, a), w, scratch, deferred, ctx);
  add_input_grad(config, dres, g.norm2, scratch.dnormed, a.mid, w.norm2, a.norm2);
  const Tensor& dattn_out =
      sublayer_out_grad(config, dres, scratch.dbranch, g.norm1_post, a.attn.out, w.norm1_post, a.norm1_post);
  attention_layer_backward(config, scratch.dnormed, g, dattn_out, a.attn, pre ? a.norm1.out : x, w, seq, scratch.attn,
                           deferred, ctx.tp, ctx.cp, ctx.fp8);
  add_input_grad(config, dres, g.norm1, scratch.dnormed, x, w.norm1, a.norm1);
}

}  // namespace tessera
