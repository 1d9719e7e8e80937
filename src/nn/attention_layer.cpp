// Attention layer forward and backward, composed from ops/.
#include "nn/attention_layer.h"

#include <numeric>
#include <utility>

#include "core/cuda/device.h"
#include "ops/attention.h"
#include "ops/attention_kv.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

namespace tessera {

namespace {

// The query and key sections of qkv (B·T rows of (NH+2NKV)·HS): [0, NH·HS) and [NH·HS, (NH+NKV)·HS).
struct QkSection {
  int64_t first_col, heads;
};
QkSection q_section(const ModelConfig& c) { return {0, c.num_heads}; }
QkSection k_section(const ModelConfig& c) { return {c.num_heads * c.head_size(), c.kv_heads()}; }

// The shape of a section's normalised rows for `rows` tokens: a row a head (rows·heads, HS), or under
// qk_norm_all_heads a row a token (rows, heads·HS).
Shape qk_norm_rows(const ModelConfig& c, int64_t rows, int64_t heads) {
  const int64_t HS = c.head_size();
  return c.qk_norm_all_heads ? Shape{rows, heads * HS} : Shape{rows * heads, HS};
}

// Under tensor parallelism OLMo 2's norms span every rank's heads: the group that sums a row's
// statistics, or null where a row is whole on each rank. A row counts size times its channels here: a
// kv head replicated over r ranks enters the summed statistics r times, as it enters the width, and
// its replicas' partial gradients are summed after backward.
TensorParallel* norm_group(const ModelConfig& c, TensorParallel* tp) { return c.qk_norm_all_heads ? tp : nullptr; }

// The RMSNorm of one section of qkv (Qwen3's per head, OLMo 2's over all heads), in place: `in`
// (qk_norm_rows) keeps the section before it (what backward reads), `rstd` (its rows) its statistics.
void head_norm_forward(const ModelConfig& c, Tensor& qkv, QkSection s, Tensor& in, Tensor& rstd, const Tensor& weight,
                       TensorParallel* group = nullptr) {
  const int64_t HS = c.head_size(), rows = qkv.numel() / c.qkv_width(), width = s.heads * HS;
  copy_columns(in, 0, qkv, s.first_col, rows, width);
  Tensor normed = Tensor::zeros(in.shape(), in.dtype(), in.device());
  if (group) {
    Tensor sums = Tensor::zeros({rstd.numel()}, DType::f32, in.device());
    rmsnorm_partial_sums(sums, in);
    group->sum_over_group(sums);
    rmsnorm_grouped_forward(normed, rstd, in, weight, sums, in.size(-1) * group->place().size, c.norm_eps);
  } else {
    rmsnorm_forward(normed, rstd, in, weight, c.norm_eps);
  }
  copy_columns(qkv, s.first_col, normed, 0, rows, width);
}

// Its backward, in place in dqkv: the section's gradient before the norm; the gain's accumulates.
// `free` (at least the section's elements) is scratch nothing else reads meanwhile (dcore, consumed).
void head_norm_backward(const ModelConfig& c, Tensor& dqkv, QkSection s, const Tensor& in, const Tensor& rstd,
                        const Tensor& weight, Tensor& dweight, const Tensor& free, TensorParallel* group) {
  const int64_t HS = c.head_size(), rows = dqkv.numel() / c.qkv_width(), width = s.heads * HS;
  Tensor dnormed = free.view(0, in.shape()), din = Tensor::zeros(in.shape(), in.dtype(), in.device());
  copy_columns(dnormed, 0, dqkv, s.first_col, rows, width);
  if (group) {
    Tensor dots = Tensor::zeros({rstd.numel()}, DType::f32, in.device());
    rmsnorm_partial_dots(dots, dnormed, in, weight, rstd);
    group->sum_over_group(dots);
    rmsnorm_grouped_backward(din, dweight, dnormed, in, weight, rstd, dots, in.size(-1) * group->place().size);
  } else {
    rmsnorm_backward(din, dweight, dnormed, in, weight, rstd);
  }
  copy_columns(dqkv, s.first_col, din, 0, rows, width);
}

// Causal attention of a's qkv (within documents under document masking), over the cp group's whole
// sequences when there is one.
void core_forward(const ModelConfig& config, AttentionActivations& a, const SequencePositions& seq,
                  ContextParallel* cp) {
  const int NH = int(config.num_heads), NKV = int(config.kv_heads());
  const float cap = config.attention_softcap;
  if (cp)
    cp->attention_forward(a.core, a.lse, a.qkv, NH, NKV, seq.doc_starts, cap);
  else
    attention_forward(a.core, a.lse, a.qkv, NH, NKV, seq.doc_starts, cap);
  if (config.mla.enabled()) latent_values_forward(config, a.latent.values, a.core);
}

// o_proj's input: the core, or latent attention's values.
const Tensor& projected(const ModelConfig& config, const AttentionActivations& a) {
  return config.mla.enabled() ? a.latent.values : a.core;
}

}  // namespace

SequencePositions block_positions(const SequencePositions& seq, const ModelConfig& config, int64_t layer) {
  SequencePositions positions = seq;
  positions.rotate = config.rotates(layer);
  if (config.slides(layer)) {
    if (seq.window_starts.defined()) positions.doc_starts = seq.window_starts;
    positions.window = config.attention_window;
  }
  if (config.local_rope(layer) && seq.local_inv_freq.defined()) positions.inv_freq = seq.local_inv_freq;
  return positions;
}

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
  if (config.mla.enabled()) latent.allocate(config, B, T, dtype, device, with_core);
  if (!config.qk_norm) return;
  q_in = Tensor::zeros(qk_norm_rows(config, B * T, config.num_heads), dtype, device);
  k_in = Tensor::zeros(qk_norm_rows(config, B * T, config.kv_heads()), dtype, device);
  q_rstd = Tensor::zeros({q_in.size(0)}, DType::f32, device);
  k_rstd = Tensor::zeros({k_in.size(0)}, DType::f32, device);
}

void attention_layer_forward(const ModelConfig& config, AttentionActivations& a, const Tensor& x,
                             const BlockWeights& w, const SequencePositions& seq, TensorParallel* tp, ContextParallel* cp,
                             Fp8Block fp8) {
  const int NH = int(config.num_heads), NKV = int(config.kv_heads());
  const Fp8Linear qkv = fp8[BlockLinear::qkv], proj = fp8[BlockLinear::attn_out];
  if (config.mla.enabled())
    latent_qkv_forward(config, a.qkv, a.latent, region_input(x, tp), w);
  else
    matmul_forward(a.qkv, qkv.operand(region_input(x, tp), Fp8Role::input),
                   qkv.operand(w.qkv.weight, Fp8Role::weight), w.qkv.bias);
  if (config.qk_norm) {
    head_norm_forward(config, a.qkv, q_section(config), a.q_in, a.q_rstd, w.q_norm, norm_group(config, tp));
    head_norm_forward(config, a.qkv, k_section(config), a.k_in, a.k_rstd, w.k_norm, norm_group(config, tp));
  }
  if (config.positions == PositionKind::rope && seq.rotate)
    rope_forward(a.qkv, seq.rope, NH, NKV, seq.inv_freq, config.rope_scales());
  core_forward(config, a, seq, cp);
  Tensor partial = all_rows_like(a.out, tp);
  matmul_forward(partial, proj.operand(projected(config, a), Fp8Role::input),
                 proj.operand(w.attn_out.weight, Fp8Role::weight), row_parallel_bias(w.attn_out.bias, tp));
  region_output(partial, a.out, tp);
}

void attention_layer_decode(const ModelConfig& config, AttentionActivations& a, const Tensor& x,
                            const BlockWeights& w, const SequencePositions& seq, Tensor& k_cache, Tensor& v_cache,
                            int64_t past) {
  const int NH = int(config.num_heads), NKV = int(config.kv_heads());
  if (config.mla.enabled())
    latent_qkv_forward(config, a.qkv, a.latent, x, w);
  else
    matmul_forward(a.qkv, x, w.qkv.weight, w.qkv.bias);
  if (config.qk_norm) {  // the statistics are not kept: no backward follows
    const int64_t rows = a.qkv.numel() / config.qkv_width();
    for (const auto& [section, weight] : {std::pair{q_section(config), &w.q_norm}, {k_section(config), &w.k_norm}}) {
      Tensor in = Tensor::zeros(qk_norm_rows(config, rows, section.heads), a.qkv.dtype(), a.qkv.device());
      Tensor rstd = Tensor::zeros({in.size(0)}, DType::f32, a.qkv.device());
      head_norm_forward(config, a.qkv, section, in, rstd, *weight);
    }
  }
  if (config.positions == PositionKind::rope && seq.rotate)
    rope_forward(a.qkv, seq.rope, NH, NKV, seq.inv_freq, config.rope_scales());
  attention_kv_forward(a.core, k_cache, v_cache, a.qkv, past, NH, NKV, seq.window, config.attention_softcap);
  if (config.mla.enabled()) latent_values_forward(config, a.latent.values, a.core);
  matmul_forward(a.out, projected(config, a), w.attn_out.weight, w.attn_out.bias);
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
  const bool latent = config.mla.enabled();
  Tensor dvalues = latent ? Tensor::zeros(a.latent.values.shape(), a.latent.values.dtype(), a.latent.values.device())
                          : scratch.dcore;
  linear_backward(dvalues, g.attn_out, proj.operand(region_output_grad(dout, tp), Fp8Role::grad),
                  proj.operand(projected(config, a), Fp8Role::input), proj.operand(w.attn_out.weight, Fp8Role::weight),
                  deferred);
  if (latent) latent_values_backward(config, scratch.dcore, dvalues);
  const float cap = config.attention_softcap;
  if (cp)
    cp->attention_backward(scratch.dqkv, scratch.dcore, a.qkv, a.core, a.lse, NH, NKV, seq.doc_starts, cap);
  else
    attention_backward(scratch.dqkv, scratch.dcore, a.qkv, a.core, a.lse, NH, NKV, seq.doc_starts, cap);
  if (config.positions == PositionKind::rope && seq.rotate)
    rope_backward(scratch.dqkv, seq.rope, NH, NKV, seq.inv_freq, config.rope_scales());
  if (config.qk_norm) {
    TensorParallel* group = norm_group(config, tp);
    head_norm_backward(config, scratch.dqkv, q_section(config), a.q_in, a.q_rstd, w.q_norm, g.q_norm, scratch.dcore,
                       group);
    head_norm_backward(config, scratch.dqkv, k_section(config), a.k_in, a.k_rstd, w.k_norm, g.k_norm, scratch.dcore,
                       group);
  }
  Tensor partial = all_rows_like(dx, tp);
  if (latent)
    latent_qkv_backward(config, partial, g, scratch.dqkv, a.latent, region_input(x, tp), w, deferred);
  else
    linear_backward(partial, g.qkv, qkv.operand(scratch.dqkv, Fp8Role::grad),
                    qkv.operand(region_input(x, tp), Fp8Role::input), qkv.operand(w.qkv.weight, Fp8Role::weight),
                    deferred);
  region_input_grad(partial, dx, tp);
}

}  // namespace tessera
