// Bytes of the decoder's activations for one micro-batch, from shapes alone, for `tessera plan
// memory`: what DecoderActivations::ensure allocates (nn/decoder_activations.cpp) with the layers'
// allocate() (decoder_block, attention_layer, mlp_layer, moe_layer, norm_layer) and the embedding's
// token copy, term by term in activation_memory.cpp. tests/train/test_memory_plan.cpp holds the two
// together: it trains and compares the host allocator's peak with the plan's.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "nn/model_config.h"
#include "nn/recompute.h"
#include "nn/stage_partition.h"

namespace tessera {

// One micro-batch on one rank: B sequences of T positions (T: the rank's share, seq_len / cp), the
// residual stream holding T_local of them (T / tp under sequence parallelism).
struct ActivationShape {
  int64_t B = 1, T = 1, T_local = 1;
  BlockRange blocks;  // the chunk's blocks
  DType dtype = DType::f32;
  RecomputePolicy recompute;
  // Under expert parallelism, the rows this rank's experts compute in each MoE layer (the tokens the
  // ep group routes to them: B·T·top_k on average, at most the experts' capacities); 0 without it.
  int64_t expert_rows = 0;
};

struct ActivationBytes {
  int64_t saved = 0;    // what forward keeps for backward: blocks, embedding output, final norm, losses, tokens
  int64_t scratch = 0;  // backward's buffers: the residual gradient, dnormed, dnorm, the layers' scratch
  int64_t total() const { return saved + scratch; }
};

// `local`: the shapes the layers compute with (tp_local_config's under tensor parallelism). Routed
// MoE rows are counted as N·top_k, which is what a rank allocates without expert parallelism; under
// it, the experts' side holds `expert_rows` more (the rows received and their outputs, forward and
// backward, and one row exchange in flight), and the expert buffers grow to them.
ActivationBytes decoder_activation_bytes(const ModelConfig& local, const ActivationShape& shape);

// The fused classifier's rows at a time, of `rows`, over `vocab_rows` (a tp rank's share of the
// padded vocabulary): 1 GiB of logits at most (Decoder::classifier_chunk), in as few chunks of equal
// rows as that allows; and the buffer's bytes.
int64_t classifier_chunk_rows(int64_t rows, int64_t vocab_rows, DType dtype);
int64_t classifier_logits_bytes(int64_t rows, int64_t vocab_rows, DType dtype);

}  // namespace tessera
