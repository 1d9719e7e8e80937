// The decoder's normalisation layer: LayerNorm (GPT-2) or RMSNorm (Llama), chosen by the config,
// with the activations backward needs. The residual variant fuses the add that precedes a norm
// (sum = a + b, then the norm of sum), the same values as the two steps apart.
#pragma once

#include "core/tensor.h"
#include "nn/decoder_layout.h"
#include "nn/model_config.h"
#include "ops/grad_into.h"

namespace tessera {

struct NormActivations {
  Tensor out;         // (B,T,C)
  Tensor mean, rstd;  // (B,T) f32; mean undefined for RMSNorm
  void allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device);
};

void norm_forward(const ModelConfig& config, NormActivations& a, const Tensor& x, const LinearWeights& w);
void residual_norm_forward(const ModelConfig& config, Tensor& sum, NormActivations& a, const Tensor& x,
                           const Tensor& branch, const LinearWeights& w);
// dx written (or added to, GradInto::add); the gain's (and bias's) gradients accumulate into g.
void norm_backward(const ModelConfig& config, Tensor& dx, LinearWeights& g, const Tensor& dout, const Tensor& x,
                   const LinearWeights& w, const NormActivations& a, GradInto into = GradInto::write);

}  // namespace tessera
