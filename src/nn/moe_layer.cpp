// MoE layer forward and backward, composed from the routing, dispatch and grouped GEMM ops.
#include "nn/moe_layer.h"

#include <cmath>

#include "ops/grouped_matmul.h"
#include "ops/matmul.h"
#include "ops/moe_dispatch.h"
#include "ops/residual.h"
#include "ops/swiglu.h"

namespace tessera {
namespace {

RouterScore score_kind(const ModelConfig& config) {
  return config.moe.router == RouterKind::sigmoid_bias ? RouterScore::sigmoid : RouterScore::softmax;
}

int64_t shared_hidden(const ModelConfig& config) { return config.moe.num_shared_experts * config.moe.expert_hidden; }

Tensor rows(const Tensor& t, int64_t count) { return t.view(0, {count, t.size(1)}); }

}  // namespace

void MoeActivations::allocate(const ModelConfig& config, int64_t B, int64_t T, int64_t T_out, DType dtype,
                              Device device, bool with_act) {
  const int64_t N = B * T, E = config.moe.num_experts, K = config.moe.top_k, C = config.channels;
  const int64_t Fe = config.moe.expert_hidden;
  auto f32 = [&](Shape shape) { return Tensor::zeros(std::move(shape), DType::f32, device); };
  logits = Tensor::zeros({N, E}, dtype, device);
  scores = f32({N, E});
  lse = f32({N});
  experts = Tensor::zeros({N, K}, DType::i32, device);
  weights = f32({N, K});
  order = Tensor::zeros({N * K}, DType::i32, device);
  offsets = Tensor::zeros({E + 1}, DType::i32);
  xs = Tensor::zeros({N * K, C}, dtype, device);
  h = Tensor::zeros({N * K, 2 * Fe}, dtype, device);
  if (with_act) act = Tensor::zeros({N * K, Fe}, dtype, device);
  ys = Tensor::zeros({N * K, C}, dtype, device);
  if (shared_hidden(config) > 0) shared.allocate(MlpKind::swiglu, B, T, T, C, shared_hidden(config), dtype, device);
  out = Tensor::zeros({B, T_out, C}, dtype, device);
}

void MoeScratch::allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device) {
  const int64_t N = B * T, E = config.moe.num_experts, K = config.moe.top_k, C = config.channels;
  const int64_t Fe = config.moe.expert_hidden, Fs = shared_hidden(config);
  dys = Tensor::zeros({N * K, C}, dtype, device);
  dact = Tensor::zeros({N * K, Fe}, dtype, device);
  dh = Tensor::zeros({N * K, 2 * Fe}, dtype, device);
  dxs = Tensor::zeros({N * K, C}, dtype, device);
  dweights = Tensor::zeros({N, K}, DType::f32, device);
  dlogits = Tensor::zeros({N, E}, dtype, device);
  dpart = Tensor::zeros({B, T, C}, dtype, device);
  if (Fs > 0) shared = MlpScratch{Tensor::zeros({B, T, 2 * Fs}, dtype, device), Tensor::zeros({B, T, Fs}, dtype, device)};
}

void moe_layer_forward(const ModelConfig& config, const MoeOptions& options, MoeActivations& a, const Tensor& x,
                       const BlockWeights& w, TensorParallel* tp) {
  // Every row: the router and the experts see all tokens (gathered under sequence parallelism).
  const Tensor input = region_input(x, tp);
  const int64_t C = config.channels, N = input.numel() / C, E = config.moe.num_experts, K = config.moe.top_k;
  const Tensor tokens = input.reshape({N, C});
  Tensor no_bias;
  matmul_forward(a.logits, tokens, w.router, no_bias);
  moe_router_forward(a.experts, a.weights, a.scores, a.lse, a.logits, w.router_bias, score_kind(config));
  const int64_t capacity =
      options.capacity_factor > 0.0f ? int64_t(std::ceil(double(options.capacity_factor) * double(N * K) / double(E)))
                                     : 0;
  a.kept = moe_dispatch_plan(a.order, a.offsets, a.experts, E, capacity);
  const int64_t M = a.kept;
  moe_gather(a.xs, tokens, a.order, M, K);
  Tensor h = rows(a.h, M), act = rows(a.act, M), ys = rows(a.ys, M);
  grouped_matmul_forward(h, rows(a.xs, M), w.experts_in, a.offsets);
  swiglu_forward(act, h);
  grouped_matmul_forward(ys, act, w.experts_out, a.offsets);
  Tensor partial = all_rows_like(a.out, tp);
  Tensor out = partial.reshape({N, C});
  moe_combine(out, a.ys, a.weights, a.order, M, K);
  if (w.shared_in.weight.defined()) {
    // Its bias on tp rank 0 only; its partial output joins the experts' in one reduction.
    const LinearWeights shared_out{w.shared_out.weight, row_parallel_bias(w.shared_out.bias, tp)};
    mlp_layer_forward(MlpKind::swiglu, a.shared, input, w.shared_in, shared_out);
    add_inplace(partial, a.shared.out);
  }
  region_output(partial, a.out, tp);
  a.losses = moe_router_losses(a.experts, a.scores, a.lse, score_kind(config));
}

void moe_activation_recompute(MoeActivations& a) {
  Tensor act = rows(a.act, a.kept);
  swiglu_forward(act, rows(a.h, a.kept));
}

void moe_layer_backward(const ModelConfig& config, Tensor& dx, BlockWeights& g, const Tensor& dout,
                        const MoeActivations& a, const Tensor& x, const BlockWeights& w, MoeLossScales scales,
                        MoeScratch& s, DeferredWeightGrads* deferred, TensorParallel* tp) {
  const Tensor input = region_input(x, tp), dout_all = region_output_grad(dout, tp);
  const int64_t C = config.channels, N = input.numel() / C, K = config.moe.top_k, M = a.kept;
  const Tensor tokens = input.reshape({N, C}), dtokens_out = dout_all.reshape({N, C});
  Tensor partial = all_rows_like(dx, tp);
  Tensor dtokens = partial.reshape({N, C}), dpart = s.dpart.reshape({N, C});
  moe_combine_backward(s.dys, s.dweights, dtokens_out, a.ys, a.weights, a.order, M, K);
  // The routing weights' gradient reads the experts' outputs, of which a tp rank holds partial sums.
  if (tp) tp->sum_over_group(s.dweights);
  Tensor dact = rows(s.dact, M), dh = rows(s.dh, M), dxs = rows(s.dxs, M);
  grouped_linear_backward(dact, g.experts_out, rows(s.dys, M), rows(a.act, M), w.experts_out, a.offsets, deferred);
  swiglu_backward(dh, dact, rows(a.h, M));
  grouped_linear_backward(dxs, g.experts_in, dh, rows(a.xs, M), w.experts_in, a.offsets, deferred);
  moe_gather_backward(dtokens, s.dxs, a.order, M, K);
  moe_router_backward(s.dlogits, s.dweights, a.experts, a.weights, a.scores, a.lse, a.logits, score_kind(config),
                      scales.aux, scales.z);
  linear_backward(dpart, LinearWeights{g.router, Tensor()}, s.dlogits, tokens, w.router, deferred);
  // The router's input gradient is whole on every rank: it joins the ranks' partial sums once.
  if (!tp || tp->place().rank == 0) add_inplace(dtokens, dpart);
  if (w.shared_in.weight.defined()) {
    mlp_layer_backward(MlpKind::swiglu, s.dpart, g.shared_in, g.shared_out, dout_all, a.shared, input, w.shared_in,
                       w.shared_out, s.shared, deferred);
    add_inplace(partial, s.dpart);
  }
  region_input_grad(partial, dx, tp);
}

std::vector<int64_t> moe_expert_load(const MoeActivations& a) {
  const int32_t* offsets = a.offsets.data<int32_t>();
  std::vector<int64_t> load(size_t(a.offsets.numel() - 1));
  for (size_t e = 0; e < load.size(); ++e) load[e] = offsets[e + 1] - offsets[e];
  return load;
}

int64_t moe_dropped(const MoeActivations& a, int64_t top_k) { return a.experts.size(0) * top_k - a.kept; }

}  // namespace tessera
