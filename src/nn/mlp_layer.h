// The dense MLP half of a block, after its norm, by the config's activation:
//   gelu:   out = down(gelu(up(x)))                      (GPT-2: c_fc, c_proj; gelu_exact: GPT-NeoX's erf form)
//   swiglu: out = down(silu(gate(x)) * up(x))            (Llama: gate_up_proj packed, down_proj)
//   geglu:  out = down(gelu(gate(x)) * up(x))            (Gemma: GELU's tanh form, packed as SwiGLU's)
//   backward: dx written from dout; parameter gradients accumulate.
// The same module runs DeepSeek's shared experts (a SwiGLU of their combined width).
#pragma once

#include "core/tensor.h"
#include "nn/decoder_layout.h"
#include "nn/deferred_weight_grads.h"
#include "nn/fp8_scaling.h"
#include "nn/tensor_parallel.h"
#include "nn/model_config.h"

namespace tessera {

struct MlpActivations {
  Tensor h;    // (B,T,F) pre-GELU, or (B,T,2F) [gate | up]
  Tensor act;  // (B,T,F) the activation's output
  Tensor out;  // (B,T,C)
  // Without `with_act`, act is left for the caller (selective recomputation shares it).
  // out holds T_out positions (T / tp under sequence parallelism), the rest all T.
  void allocate(MlpKind kind, int64_t B, int64_t T, int64_t T_out, int64_t C, int64_t F, DType dtype, Device device,
                bool with_act = true);
};

// Scratch shared by every block's backward: dh (B,T,F or 2F) and, for SwiGLU, dact (B,T,F).
struct MlpScratch {
  Tensor dh, dact;
};

// With `tp`, a tensor-parallel rank's share of the width: the output reduced over the group, the
// input gradient too.
void mlp_layer_forward(MlpKind kind, MlpActivations& a, const Tensor& x, const LinearWeights& in,
                       const LinearWeights& out, TensorParallel* tp = nullptr, Fp8Block fp8 = {});
// Selective recomputation: act again from the saved h.
void mlp_activation_recompute(MlpKind kind, MlpActivations& a);
void mlp_layer_backward(MlpKind kind, Tensor& dx, LinearWeights& g_in, LinearWeights& g_out, const Tensor& dout,
                        const MlpActivations& a, const Tensor& x, const LinearWeights& in, const LinearWeights& out,
                        MlpScratch& scratch, DeferredWeightGrads* deferred = nullptr, TensorParallel* tp = nullptr,
                        Fp8Block fp8 = {});

}  // namespace tessera
