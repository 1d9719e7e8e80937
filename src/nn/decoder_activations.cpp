// Allocation of the decoder's activations for a given (B,T).
#include "nn/decoder_activations.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "ops/rope.h"

namespace tessera {
namespace {

// The shared buffers of recomputed blocks, one set per block kind (dense, MoE), made on first use:
// a whole block's activations for full recomputation, only the dropped tensors for selective.
class SharedBlocks {
 public:
  SharedBlocks(const ModelConfig& config, const DecoderActivations& acts) : config_(config), acts_(acts) {}

  const BlockActivations& of(int64_t layer) {
    const bool moe = config_.is_moe_block(layer);
    BlockActivations& set = moe ? moe_ : dense_;
    bool& made = moe ? moe_made_ : dense_made_;
    if (made) return set;
    made = true;
    const int64_t B = acts_.B, T = acts_.T;
    if (acts_.recompute.mode == Recompute::full) {
      set.allocate(config_, layer, B, T, acts_.T_local, acts_.dtype, acts_.device);
      return set;
    }
    set.attn.core = Tensor::zeros({B, T, config_.attention_width()}, acts_.dtype, acts_.device);
    set.attn.lse = Tensor::zeros({B, config_.num_heads, T}, DType::f32, acts_.device);
    if (config_.mla.enabled())
      set.attn.latent.values = Tensor::zeros({B, T, config_.value_width()}, acts_.dtype, acts_.device);
    if (moe)
      set.moe.act = Tensor::zeros({B * T * config_.moe.top_k, config_.moe.expert_hidden}, acts_.dtype, acts_.device);
    else
      set.mlp.act = Tensor::zeros({B, T, config_.hidden()}, acts_.dtype, acts_.device);
    return set;
  }

 private:
  const ModelConfig& config_;
  const DecoderActivations& acts_;
  BlockActivations dense_, moe_;
  bool dense_made_ = false, moe_made_ = false;
};

}  // namespace

void DecoderActivations::allocate_blocks(const ModelConfig& config) {
  blocks.assign(size_t(config.num_layers), BlockActivations());
  SharedBlocks shared(config, *this);
  for (int64_t l = range.first; l < range.end; ++l) {
    BlockActivations& a = blocks[size_t(l)];
    if (!recompute.covers(l)) {
      a.allocate(config, l, B, T, T_local, dtype, device);
      continue;
    }
    const BlockActivations& set = shared.of(l);
    if (recompute.mode == Recompute::full) {
      a = set;  // every tensor shared ...
      a.out = Tensor::zeros({B, T_local, config.channels}, dtype, device);  // ... but the output, kept
      continue;
    }
    a.allocate(config, l, B, T, T_local, dtype, device, &set);
  }
}

void DecoderActivations::ensure(const ModelConfig& config, int64_t batch, int64_t seq_len, BlockRange blocks,
                                Device on, DType activation_dtype, RecomputePolicy policy, int64_t seq_shards,
                                CpPlace context) {
  if (batch == B && seq_len == T && seq_len / seq_shards == T_local && blocks == range && on == device &&
      activation_dtype == dtype && policy == recompute && context.rank == cp.rank && context.size == cp.size)
    return;
  *this = DecoderActivations();  // free the old buffers before the new ones are allocated
  B = batch;
  T = seq_len;
  T_local = seq_len / seq_shards;
  range = blocks;
  device = on;
  dtype = activation_dtype;
  recompute = policy;
  cp = context;
  const int64_t C = config.channels, F = config.hidden();
  auto btc = [&](int64_t width) { return Tensor::zeros({B, T, width}, dtype, device); };
  auto local = [&] { return Tensor::zeros({B, T_local, C}, dtype, device); };  // the residual stream's
  embedded = local();
  allocate_blocks(config);
  if (range.end == config.num_layers) {
    final_norm.allocate(config, B, T_local, dtype, device);
    losses = Tensor::zeros({B, T}, DType::f32, device);
  }
  if (config.positions == PositionKind::rope) {
    Tensor positions = rope_positions(0, T, device);
    if (cp.size > 1) {
      const std::vector<int32_t> chunks = cp_positions(T * cp.size, cp);
      positions = Tensor::zeros({T}, DType::i32);
      std::copy(chunks.begin(), chunks.end(), positions.data<int32_t>());
      positions = tensor_to(positions, device);
    }
    seq.rope = positions;
    seq.inv_freq = tensor_to(rope_inv_freq(config.rotary_dim(), config.rope, T * cp.size), device);
    if (config.local_rope_theta > 0) {  // the sliding blocks' own base, unscaled
      const RopeConfig local{.theta = config.local_rope_theta};
      seq.local_inv_freq = tensor_to(rope_inv_freq(config.rotary_dim(), local), device);
    }
  }

  dresidual = local();
  // dcore is consumed before dnormed is written, so they share a buffer: all T positions of a
  // tensor-parallel rank's heads fit in dnormed's (B, T / tp, C) under sequence parallelism, unless the
  // heads are wider than the model (Qwen3: 16 heads of 128 over 1024 channels).
  const Tensor dnormed_or_dcore =
      Tensor::zeros({std::max(B * T_local * C, B * T * config.attention_width())}, dtype, device);
  scratch.dnormed = dnormed_or_dcore.view(0, {B, T_local, C});
  scratch.attn.dcore = dnormed_or_dcore.view(0, {B, T, config.attention_width()});
  if (has_post_norms(config.norm_placement) || config.parallel_residual) scratch.dbranch = local();
  const bool swiglu = is_gated(config.mlp);
  const int64_t mlp_width = swiglu ? 2 * F : F;
  const Tensor wide = btc(std::max(config.qkv_width(), mlp_width));
  scratch.attn.dqkv = wide.view(0, {B, T, config.qkv_width()});
  scratch.mlp.dh = wide.view(0, {B, T, mlp_width});
  if (swiglu) scratch.mlp.dact = btc(F);
  if (config.moe.enabled()) scratch.moe.allocate(config, B, T, dtype, device);
}

}  // namespace tessera
