// Saved activations and backward scratch of the decoder, or of one pipeline chunk of it (a range of
// blocks), for one (B,T), allocated once per shape.
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
#include "nn/stage_partition.h"

namespace tessera {

struct DecoderActivations {
  int64_t B = 0, T = 0;
  int64_t T_local = 0;  // positions of the residual stream: T, or T / tp under sequence parallelism
  BlockRange range;  // the blocks these activations are for; blocks outside it stay unallocated
  RecomputePolicy recompute;
  Device device = Device::cpu;
  DType dtype = DType::f32;  // of the (B,T,k·C) activations and logits; statistics stay f32
  Tensor embedded;           // (B,T,C): the first block's input (the embedding's output, or the previous chunk's)
  Tensor tokens;             // the forward's tokens on the device, for the embedding's backward
  float dloss = 0.0f;        // the forward's loss gradient, which scales the auxiliary losses' gradients
  std::vector<BlockActivations> blocks;
  NormActivations final_norm;
  Tensor logits;  // (rows, Vp), sized by Decoder::forward: a chunk of rows (training, evaluation) or
                  // all B*T (inference)
  Tensor losses;  // (B,T) f32, when the range ends at the last block
  SequencePositions seq;  // under RoPE the tokens' positions (0..T-1, or a cp rank's chunks) and the inverse
                          // frequencies; under document masking the forward's document starts
  CpPlace cp;     // the context-parallel rank whose positions of every sequence these are
  // backward scratch
  Tensor dresidual;  // (B,T,C): the residual stream's gradient, flowing down (into a chunk: its
                     // output's gradient; out of it after backward: its input's)
  BlockScratch scratch;  // scratch.dnormed also carries the classifier's gradient into the final norm
  DeferredWeightGrads deferred;  // zero-bubble: the weight gradients its backward left for later

  void allocate_blocks(const ModelConfig& config);
  // (Re)allocates for a new (B,T), range, device, dtype, policy, sequence split (seq_shards ranks
  // hold 1/seq_shards of the residual stream's positions) or context-parallel place (seq_len is then
  // the rank's share of each sequence); a no-op when all are unchanged.
  void ensure(const ModelConfig& config, int64_t batch, int64_t seq_len, BlockRange blocks, Device on,
              DType activation_dtype, RecomputePolicy policy, int64_t seq_shards = 1, CpPlace context = {});
};

}  // namespace tessera
