// Saved activations and backward scratch of the decoder for one (B,T), allocated once per shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/attention_layer.h"
#include "nn/decoder_block.h"
#include "nn/model_config.h"
#include "nn/norm_layer.h"
#include "nn/recompute.h"

namespace tessera {

struct DecoderActivations {
  int64_t B = 0, T = 0;
  RecomputePolicy recompute;
  Device device = Device::cpu;
  DType dtype = DType::f32;  // of the (B,T,k·C) activations and logits; statistics stay f32
  Tensor embedded;           // (B,T,C): the first block's input
  std::vector<BlockActivations> blocks;
  NormActivations final_norm;
  Tensor logits;  // (rows, Vp), sized by Decoder::forward: a chunk of rows (training, evaluation) or
                  // all B*T (inference)
  Tensor losses;  // (B,T) f32
  Rotary rotary;  // positions 0..T-1 and the inverse frequencies, when the model uses RoPE
  // backward scratch
  Tensor dresidual;  // (B,T,C): the residual stream's gradient, flowing down
  BlockScratch scratch;  // scratch.dnormed also carries the classifier's gradient into the final norm

  void allocate_blocks(const ModelConfig& config);
  // (Re)allocates for a new (B,T), device, dtype or policy; a no-op when all are unchanged.
  void ensure(const ModelConfig& config, int64_t batch, int64_t seq_len, Device on, DType activation_dtype,
              RecomputePolicy policy);
};

}  // namespace tessera
