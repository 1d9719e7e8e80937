// Allocation of the decoder's activations for a given (B,T).
#include "nn/decoder_activations.h"

#include <algorithm>
#include <numeric>

#include "core/cuda/device.h"
#include "ops/rope.h"

namespace tessera {

void DecoderActivations::ensure(const ModelConfig& config, int64_t batch, int64_t seq_len, Device on,
                                DType activation_dtype) {
  if (batch == B && seq_len == T && on == device && activation_dtype == dtype) return;
  *this = DecoderActivations();  // free the old buffers before the new ones are allocated
  B = batch;
  T = seq_len;
  device = on;
  dtype = activation_dtype;
  const int64_t C = config.channels, F = config.hidden();
  auto btc = [&](int64_t width) { return Tensor::zeros({B, T, width}, dtype, device); };
  embedded = btc(C);
  blocks.resize(size_t(config.num_layers));
  for (BlockActivations& a : blocks) a.allocate(config, B, T, dtype, device);
  final_norm.allocate(config, B, T, dtype, device);
  losses = Tensor::zeros({B, T}, DType::f32, device);
  if (config.positions == PositionKind::rope) {
    Tensor positions = Tensor::zeros({T}, DType::i32);
    std::iota(positions.data<int32_t>(), positions.data<int32_t>() + T, 0);
    rotary = Rotary{tensor_to(positions, device), tensor_to(rope_inv_freq(config.head_size(), config.rope), device)};
  }

  dresidual = btc(C);
  scratch.dnormed = btc(C);
  scratch.dnorm = btc(C);
  scratch.attn.dcore = scratch.dnormed;  // consumed before dnormed is written
  const bool swiglu = config.mlp == MlpKind::swiglu;
  const int64_t mlp_width = swiglu ? 2 * F : F;
  const Tensor wide = btc(std::max(config.qkv_width(), mlp_width));
  scratch.attn.dqkv = wide.view(0, {B, T, config.qkv_width()});
  scratch.mlp.dh = wide.view(0, {B, T, mlp_width});
  if (swiglu) scratch.mlp.dact = btc(F);
}

}  // namespace tessera
