// Saved activations and backward scratch of GPT-2 for one (B,T), allocated once per shape.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/gpt2_config.h"

namespace tessera {

struct GPT2LayerActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // (B,T,C), (B,T), (B,T)
  Tensor qkv;                      // (B,T,3C)
  Tensor atty, lse;                // (B,T,C), (B,NH,T)
  Tensor attproj;                  // (B,T,C)
  Tensor residual2;                // (B,T,C)
  Tensor ln2, ln2_mean, ln2_rstd;  // (B,T,C), (B,T), (B,T)
  Tensor fch, fch_gelu;            // (B,T,4C)
  Tensor fcproj;                   // (B,T,C)
  Tensor residual3;                // (B,T,C): the layer's output
};

struct GPT2Activations {
  int64_t B = 0, T = 0;
  Device device = Device::cpu;
  DType dtype = DType::f32;  // of the (B,T,k·C) activations and logits; statistics stay f32
  Tensor encoded;                  // (B,T,C)
  std::vector<GPT2LayerActivations> layers;
  Tensor lnf, lnf_mean, lnf_rstd;  // (B,T,C), (B,T), (B,T)
  Tensor logits;                   // (rows, Vp), sized by GPT2::forward: a chunk of rows (training,
                                   // evaluation) or all B*T (inference)
  Tensor losses;                   // (B,T)
  // backward scratch
  Tensor dresidual, dbtc, dnorm;   // (B,T,C)
  Tensor dwide;                    // (B,T,4C); also holds dqkv (B,T,3C)

  // (Re)allocates for a new (B,T), device or dtype; a no-op when all are unchanged.
  void ensure(const GPT2Config& config, int64_t batch, int64_t seq_len, Device on, DType activation_dtype);
};

}  // namespace tessera
