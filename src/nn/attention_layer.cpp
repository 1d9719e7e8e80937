// Attention layer forward and backward, composed from ops/.
#include "nn/attention_layer.h"

#include <numeric>

#include "core/cuda/device.h"
#include "ops/attention.h"
#include "ops/attention_kv.h"
#include "ops/matmul.h"
#include "ops/rope.h"

namespace tessera {

namespace {

// Causal attention of a's qkv (within documents under document masking), over the cp group's whole
// sequences when there is one.
void core_forward(const ModelConfig& config, AttentionActivations& a, const SequencePositions& seq,
                  ContextParallel* cp) {
  const int NH = int(config.num_heads), NKV = int(config.kv_heads());
  if (cp)
    cp->attention_forward(a.core, a.lse, a.qkv, NH, NKV, seq.doc_starts);
  else
    attention_forward(a.core, a.lse, a.qkv, NH, NKV, seq.doc_starts);
}

}  // namespace

Tensor rope_positions(int64_t first, int64_t count, Device device) {
  Tensor positions = Tensor::zeros({count}, DType::i32);
  std::iota(positions.data<int32_t>(), positions.data<int32_t>() + count, int32_t(first));
  return tensor_to(positions, device);
}

void AttentionActivations::allocate(const ModelConfig& config, int64_t B, int64_t T, int64_t T_out, DType dtype,
                                    Device device, bool with_core) {
  qkv = Tensor::zeros({B, T, config.qkv_width()}, dtype, device);
  if (with_core) {
    core = Tensor::zeros({B, T, config.attention_width()}, dtype, device);
    lse = Tensor::zeros({B, config.num_heads, T}, DType::f32, device);
  }
  out = Tensor::zeros({B, T_out, config.channels}, dtype, device);
}

void attention_layer_forward(const ModelConfig& config, AttentionActivations& a, const Tensor& x,
                             const BlockWeights& w, const SequencePositions& seq, TensorParallel* tp, ContextParallel* cp,
                             Fp8Block fp8) {
  const int NH = int(config.num_heads), NKV = int(config.kv_heads());
  const Fp8Linear qkv = fp8[BlockLinear::qkv], proj = fp8[BlockLinear::attn_out];
  matmul_forward(a.qkv, qkv.operand(region_input(x, tp), Fp8Role::input), qkv.operand(w.qkv.weight, Fp8Role::weight),
                 w.qkv.bias);
  if (config.positions == PositionKind::rope) rope_forward(a.qkv, seq.rope, NH, NKV, seq.inv_freq);
  core_forward(config, a, seq, cp);
  Tensor partial = all_rows_like(a.out, tp);
  matmul_forward(partial, proj.operand(a.core, Fp8Role::input), proj.operand(w.attn_out.weight, Fp8Role::weight),
                 row_parallel_bias(w.attn_out.bias, tp));
  region_output(partial, a.out, tp);
}

void attention_layer_decode(const ModelConfig& config, AttentionActivations& a, const Tensor& x,
                            const BlockWeights& w, const SequencePositions& seq, Tensor& k_cache, Tensor& v_cache,
                            int64_t past) {
  const int NH = int(config.num_heads), NKV = int(config.kv_heads());
  matmul_forward(a.qkv, x, w.qkv.weight, w.qkv.bias);
  if (config.positions == PositionKind::rope) rope_forward(a.qkv, seq.rope, NH, NKV, seq.inv_freq);
  attention_kv_forward(a.core, k_cache, v_cache, a.qkv, past, NH, NKV);
  matmul_forward(a.out, a.core, w.attn_out.weight, w.attn_out.bias);
}

void attention_core_recompute(const ModelConfig& config, AttentionActivations& a, const SequencePositions& seq,
                              ContextParallel* cp) {
  core_forward(config, a, seq, cp);
}

void attention_layer_backward(const ModelConfig& config, Tensor& dx, BlockWeights& g, const Tensor& dout,
                              const AttentionActivations& a, const Tensor& x, const BlockWeights& w,
                              const SequencePositions& seq, AttentionScratch& scratch, DeferredWeightGrads* deferred,
                              TensorParallel* tp, ContextParallel* cp, Fp8Block fp8) {
  const int NH = int(config.num_heads), NKV = int(config.kv_heads());
  const Fp8Linear qkv = fp8[BlockLinear::qkv], proj = fp8[BlockLinear::attn_out];
  linear_backward(scratch.dcore, g.attn_out, proj.operand(region_output_grad(dout, tp), Fp8Role::grad),
                  proj.operand(a.core, Fp8Role::input), proj.operand(w.attn_out.weight, Fp8Role::weight), deferred);
  if (cp)
    cp->attention_backward(scratch.dqkv, scratch.dcore, a.qkv, a.core, a.lse, NH, NKV, seq.doc_starts);
  else
    attention_backward(scratch.dqkv, scratch.dcore, a.qkv, a.core, a.lse, NH, NKV, seq.doc_starts);
  if (config.positions == PositionKind::rope) rope_backward(scratch.dqkv, seq.rope, NH, NKV, seq.inv_freq);
  Tensor partial = all_rows_like(dx, tp);
  linear_backward(partial, g.qkv, qkv.operand(scratch.dqkv, Fp8Role::grad), qkv.operand(region_input(x, tp), Fp8Role::input),
                  qkv.operand(w.qkv.weight, Fp8Role::weight), deferred);
  region_input_grad(partial, dx, tp);
}

}  // namespace tessera
