// The Mixture-of-Experts MLP half of a block, after its norm (Mixtral; DeepSeek-style with shared
// experts and a sigmoid router):
//   router:  logits = x Wr^T (N,E); each token picks top_k experts (ops/moe_router.h) with weights
//            renormalised to sum to 1;
//   experts: the routed tokens are permuted into expert order, each expert's SwiGLU runs as one
//            GEMM over its rows (ops/grouped_matmul.h), and the outputs are combined back per token
//            weighted by the router (ops/moe_dispatch.h), the sum times routed_scale (DeepSeek-V3's
//            routed_scaling_factor; 1 elsewhere); no per-token loops;
//   shared:  DeepSeek's always-on experts, one dense SwiGLU over every token, added (Qwen2-MoE's times a
//            sigmoid gate a token, ops/sigmoid_gate.h); under expert parallelism computed (forward and
//            backward) while the routed rows travel.
// Dropless by default; a capacity factor keeps at most ceil(factor * N * top_k / E) rows per
// expert and drops the rest (those tokens' other choices still count). The auxiliary losses
// (load balancing, router z-loss) are reported per forward and enter backward through the scales
// the decoder computes from their coefficients.
// Expert parallelism (nn/expert_parallel.h): the rank holds E/ep of the experts; its routed rows go
// to their experts' ranks, which run the grouped GEMMs over every rank's rows for their experts, and
// the outputs come back in order; backward sends the output gradients the same way and the input
// gradients back. Routing, capacity and the auxiliary losses stay with the rank that owns the tokens.
// Context parallelism (nn/context_parallel.h): the load-balancing loss is the whole sequences' —
// its statistics are summed over the cp group — and each rank reports its share of both losses.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/context_parallel.h"
#include "nn/decoder_layout.h"
#include "nn/expert_parallel.h"
#include "nn/mlp_layer.h"
#include "nn/model_config.h"
#include "ops/moe_router.h"

namespace tessera {

// Training options of the MoE layers (run flags, not architecture).
struct MoeOptions {
  float aux_coef = 0.01f;       // load-balancing loss coefficient (--moe-aux-coef)
  float z_coef = 0.0f;          // router z-loss coefficient (--moe-z-coef)
  float capacity_factor = 0.0f; // 0 = dropless (--moe-capacity-factor)
};

struct MoeActivations {
  Tensor logits, scores, lse;  // (N,E), (N,E), (N) f32
  Tensor experts, weights;     // (N,K) i32, (N,K) f32
  Tensor scaled_weights;       // (N,K) f32: weights times config.moe.routed_scale, when that is not 1
  Tensor order, offsets;       // (N*K) i32, (E+1) i32 on the host
  int64_t kept = 0;            // M: routed rows actually computed
  std::vector<double> routed;  // (E) this rank's router choices per expert, before the capacity drops
  Tensor xs, h, act, ys;       // (N*K, C), (N*K, 2Fe), (N*K, Fe), (N*K, C): rows < kept used
  // What this rank's experts computed, expert by expert: xs, offsets, ys and kept themselves, or under
  // expert parallelism the rows the ep group sent them (h and act grow to that many rows).
  Tensor expert_xs, expert_offsets, expert_ys;
  int64_t expert_rows = 0;
  std::vector<int64_t> sent, received;  // under ep: rows per (peer, the receiver's local expert)
  MlpActivations shared;       // the shared experts, when the model has them
  Tensor shared_gate;          // (N,1): their gate's logits, when gated (config.moe.shared_gate)
  Tensor out;                  // (B,T_out,C): T_out = T / tp under sequence parallelism
  RouterLosses losses;         // this forward's aux and z (under cp: this rank's share of the sequences')
  RouterBalance balance;       // under context parallelism: aux's statistics summed over the cp group
  // Without `with_act`, act is left for the caller (selective recomputation shares it).
  void allocate(const ModelConfig& config, int64_t B, int64_t T, int64_t T_out, DType dtype, Device device,
                bool with_act = true);
};

// Backward scratch shared by every MoE block.
struct MoeScratch {
  Tensor dys, dact, dh, dxs;  // like ys, act, h, xs
  Tensor expert_dys, expert_dxs;  // under expert parallelism: like expert_ys and expert_xs
  Tensor dweights, dlogits;   // (N,K), (N,E)
  Tensor dpart;               // (B,T,C): one contribution to dx at a time
  MlpScratch shared;
  Tensor dshared, dgate;      // gated shared experts: their output's gradient (B,T,C) and the gate logits' (N,1)
  void allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device);
};

// The gradient weights of this layer's auxiliary losses in the objective.
struct MoeLossScales {
  float aux = 0.0f, z = 0.0f;
};

// With `tp`, a tensor-parallel rank's share of every expert's (and the shared experts') width; the
// router runs whole on every rank. With `ep`, the weights hold this ep rank's experts only. With
// `cp`, x holds the rank's share of every sequence (dropless routing only). With `fp8`, the expert
// GEMMs (each the rank's experts as one tensor) and the shared experts' round their operands to fp8;
// the router stays in the compute dtype.
void moe_layer_forward(const ModelConfig& config, const MoeOptions& options, MoeActivations& a, const Tensor& x,
                       const BlockWeights& w, TensorParallel* tp = nullptr, ExpertParallel* ep = nullptr,
                       ContextParallel* cp = nullptr, Fp8Block fp8 = {});
// Selective recomputation: the experts' SwiGLU output again from the saved h.
void moe_activation_recompute(MoeActivations& a);
void moe_layer_backward(const ModelConfig& config, Tensor& dx, BlockWeights& g, const Tensor& dout,
                        const MoeActivations& a, const Tensor& x, const BlockWeights& w, MoeLossScales scales,
                        MoeScratch& scratch, DeferredWeightGrads* deferred = nullptr, TensorParallel* tp = nullptr,
                        ExpertParallel* ep = nullptr, ContextParallel* cp = nullptr, Fp8Block fp8 = {});

// Rows per expert of the last forward that the experts computed (from the plan's offsets: a
// capacity's drops left out; a.routed holds the router's choices).
std::vector<int64_t> moe_expert_load(const MoeActivations& a);

}  // namespace tessera
