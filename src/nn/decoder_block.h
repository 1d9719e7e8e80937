// One transformer block, pre-norm:
//   mid = x + attention(norm1(x));   out = mid + mlp(norm2(mid))
// norm1(x) is computed before forward() (by the previous block's fused add, or by the decoder for
// block 0), and forward() fuses its last add with the norm that reads `out` when it is given one
// (the next block's norm1, or the final norm). Under NormPlacement::post (OLMo 2) the norms sit on the
// sublayers' outputs instead, computed by forward() (the final norm still fused), and under sandwich
// (Gemma) on both:
//   mid = x + norm1_post(attention(x));   out = mid + norm2_post(mlp(mid))                 (post)
//   mid = x + norm1_post(attention(norm1(x)));   out = mid + norm2_post(mlp(norm2(mid)))   (sandwich)
// and with a parallel residual (GPT-NeoX) both sublayers read the block's input (under a shared norm, Cohere's,
// both norm1(x)):
//   mid = x + attention(norm1(x));   out = mid + mlp(norm2(x))
// backward() takes the gradient of `out` in dres and
// leaves the gradient of x there; parameter gradients accumulate. The MLP is dense or MoE, as the
// block's weights say (a MoE block has a router).
#pragma once

#include "nn/attention_layer.h"
#include "nn/decoder_layout.h"
#include "nn/mlp_layer.h"
#include "nn/model_config.h"
#include "nn/moe_layer.h"
#include "nn/norm_layer.h"
#include "nn/recompute.h"

namespace tessera {

struct BlockActivations {
  NormActivations norm1;       // of x (pre-norm, sandwich)
  AttentionActivations attn;
  NormActivations norm1_post;  // of attn.out (post-norm, sandwich)
  Tensor mid;                  // (B,T,C): x + attention's branch
  NormActivations norm2;       // of mid (pre-norm, sandwich)
  MlpActivations mlp;  // a dense block's
  MoeActivations moe;  // a MoE block's
  NormActivations norm2_post;  // of the MLP's output (post-norm, sandwich)
  Tensor out;          // (B,T,C): the block's output, the next block's input
  // With `selective`, the tensors selective recomputation drops (attention core and log-sum-exp,
  // the MLP activation's output) are not allocated but shared with that set.
  // The residual stream (norms, mid, out and the layers' outputs) holds T_local positions: T, or
  // T / tp under sequence parallelism; the layers' insides hold all T.
  void allocate(const ModelConfig& config, int64_t layer, int64_t B, int64_t T, int64_t T_local, DType dtype,
                Device device, const BlockActivations* selective = nullptr);
  const Tensor& mlp_out() const { return moe.out.defined() ? moe.out : mlp.out; }
};

// Backward scratch shared by every block: dnormed (B,T,C) plus the layers' own; under post-norm
// dbranch (B,T,C), a sublayer output's gradient, and under a parallel residual the MLP input's.
struct BlockScratch {
  Tensor dnormed, dbranch;
  AttentionScratch attn;
  MlpScratch mlp;
  MoeScratch moe;  // allocated when the model has MoE blocks
};

// The norm that reads a block's output, fused with its last add.
struct NextNorm {
  NormActivations* acts = nullptr;  // null: no fusion (out = mid + mlp)
  const LinearWeights* weights = nullptr;
};

// What a block's layers act through: the parallel mappings (null where that axis has one rank), and
// the fp8 scaling of its linear layers (none: they compute in the compute dtype).
struct BlockContext {
  TensorParallel* tp = nullptr;
  ExpertParallel* ep = nullptr;
  ContextParallel* cp = nullptr;
  Fp8Block fp8;
};

// `config`: the shapes the layers compute with (a tensor-parallel rank's share under tp).
void block_forward(const ModelConfig& config, const MoeOptions& moe, BlockActivations& a, const Tensor& x,
                   const BlockWeights& w, const SequencePositions& seq, NextNorm next, BlockContext ctx = {});
// Generation: the block for new tokens at positions past.. over its key/value cache; no fusion
// with the next norm (a.norm1 is computed here).
void block_decode(const ModelConfig& config, BlockActivations& a, const Tensor& x, const BlockWeights& w,
                  const SequencePositions& seq, Tensor& k_cache, Tensor& v_cache, int64_t past);
// Before block_backward of a recomputed block: re-runs what `mode` dropped (see Recompute): the
// whole forward from x (full), or the attention core and the MLP activation (selective).
void block_recompute(const ModelConfig& config, Recompute mode, const MoeOptions& moe, BlockActivations& a,
                     const Tensor& x, const BlockWeights& w, const SequencePositions& seq, BlockContext ctx = {});
// With `deferred`, the linear layers' weight gradients are recorded there instead (zero-bubble).
void block_backward(const ModelConfig& config, MoeLossScales moe, Tensor& dres, BlockWeights& g,
                    const BlockActivations& a, const Tensor& x, const BlockWeights& w, const SequencePositions& seq,
                    BlockScratch& scratch, DeferredWeightGrads* deferred = nullptr, BlockContext ctx = {});

}  // namespace tessera
