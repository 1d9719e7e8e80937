// MoE layer forward and backward, composed from the routing, dispatch and grouped GEMM ops.
#include "nn/moe_layer.h"

#include <cmath>
#include <functional>

#include "core/cuda/device.h"
#include "ops/grouped_matmul.h"
#include "ops/matmul.h"
#include "ops/moe_dispatch.h"
#include "ops/norm.h"
#include "ops/residual.h"
#include "ops/sigmoid_gate.h"
#include "ops/swiglu.h"

namespace tessera {
namespace {

RouterScore score_kind(const ModelConfig& config) {
  return config.moe.router == RouterKind::sigmoid_bias ? RouterScore::sigmoid : RouterScore::softmax;
}

int64_t shared_hidden(const ModelConfig& config) { return config.moe.num_shared_experts * config.moe.expert_hidden; }

Tensor rows(const Tensor& t, int64_t count) { return t.view(0, {count, t.size(1)}); }

// t, or a new tensor of its width and dtype when it has fewer than `count` rows.
void ensure_rows(Tensor& t, int64_t count) {
  if (t.size(0) < count) t = Tensor::zeros({count, t.size(1)}, t.dtype(), t.device());
}

// Moves the (peer, local expert) chunks of rows, `received` long each, between the order they
// travel in (peer-major) and the grouped GEMM's (expert-major), in the direction `to_experts` says.
void regroup(Tensor& to, const Tensor& from, const std::vector<int64_t>& received, int64_t local_experts,
             bool to_experts) {
  const int64_t peers = int64_t(received.size()) / local_experts, width = from.size(1);
  std::vector<int64_t> peer_major(received.size()), expert_major(received.size());
  int64_t at = 0;
  for (size_t i = 0; i < received.size(); ++i) peer_major[i] = at, at += received[i];
  at = 0;
  for (int64_t j = 0; j < local_experts; ++j)
    for (int64_t p = 0; p < peers; ++p) {
      const size_t i = size_t(p * local_experts + j);
      expert_major[i] = at, at += received[i];
    }
  for (size_t i = 0; i < received.size(); ++i) {
    if (received[i] == 0) continue;
    const int64_t src = to_experts ? peer_major[i] : expert_major[i];
    const int64_t dst = to_experts ? expert_major[i] : peer_major[i];
    Tensor chunk = to.view(dst * width, {received[i], width});
    copy_tensor(chunk, from.view(src * width, {received[i], width}));
  }
}

// The router balance statistics of every rank of the cp group, summed.
RouterBalance summed_over(ContextParallel& cp, const RouterBalance& mine) {
  std::vector<double> values = mine.counts;
  values.insert(values.end(), mine.prob_sums.begin(), mine.prob_sums.end());
  values.push_back(mine.tokens);
  values = cp.sum_over_group(values);
  const auto E = long(mine.counts.size());
  return RouterBalance{{values.begin(), values.begin() + E}, {values.begin() + E, values.begin() + 2 * E}, values.back()};
}

// This rank's M routed rows of `mine` (global expert order) to their experts' ranks: `expert_side`
// receives the group's rows for this rank's experts, expert by expert (a.sent and a.received say
// how many travel).
void send_to_experts(Tensor& expert_side, const Tensor& mine, const MoeActivations& a, ExpertParallel& ep,
                     const std::function<void()>& meanwhile) {
  const int64_t local = int64_t(a.sent.size()) / ep.place().size;
  Tensor arrived = Tensor::zeros({a.expert_rows, mine.size(1)}, mine.dtype(), mine.device());
  ep.exchange_rows(rows(mine, a.kept), rows_per_peer(a.sent, local), arrived, rows_per_peer(a.received, local),
                   meanwhile);
  ensure_rows(expert_side, a.expert_rows);
  regroup(expert_side, arrived, a.received, local, true);
}

// The reverse: rows computed by this rank's experts (`expert_side`, expert-major) back to the ranks
// they came from, landing in `mine` (M rows, global expert order).
void return_from_experts(Tensor& mine, const Tensor& expert_side, const MoeActivations& a, ExpertParallel& ep) {
  const int64_t local = int64_t(a.sent.size()) / ep.place().size;
  Tensor leaving = Tensor::zeros({a.expert_rows, expert_side.size(1)}, expert_side.dtype(), expert_side.device());
  regroup(leaving, expert_side, a.received, local, false);
  Tensor landing = rows(mine, a.kept);
  ep.exchange_rows(leaving, rows_per_peer(a.received, local), landing, rows_per_peer(a.sent, local), {});
}

// Expert parallelism's dispatch: the counts first (a.sent from the plan's offsets, a.received from
// the peers, a.expert_offsets the groups of this rank's experts), then the routed rows a.xs, with
// `meanwhile` run while they travel.
void dispatch_to_experts(MoeActivations& a, ExpertParallel& ep, int64_t num_experts, int64_t max_rows,
                         const std::function<void()>& meanwhile) {
  const int64_t local = num_experts / ep.place().size, peers = ep.place().size;
  const int32_t* offsets = a.offsets.data<int32_t>();
  a.sent.assign(size_t(num_experts), 0);
  for (int64_t e = 0; e < num_experts; ++e) a.sent[size_t(e)] = offsets[e + 1] - offsets[e];
  a.received = ep.exchange_counts(a.sent, local, max_rows);
  a.expert_offsets = Tensor::zeros({local + 1}, DType::i32);
  int32_t* groups = a.expert_offsets.data<int32_t>();
  for (int64_t j = 0; j < local; ++j) {
    groups[j + 1] = groups[j];
    for (int64_t p = 0; p < peers; ++p) groups[j + 1] += int32_t(a.received[size_t(p * local + j)]);
  }
  a.expert_rows = groups[local];
  send_to_experts(a.expert_xs, a.xs, a, ep, meanwhile);
}

// The weights the experts' outputs are combined with: the router's, times routed_scale.
const Tensor& combine_weights(const ModelConfig& config, const MoeActivations& a) {
  return config.moe.routed_scale != 1.0f ? a.scaled_weights : a.weights;
}

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
  if (config.moe.routed_scale != 1.0f) scaled_weights = f32({N, K});
  order = Tensor::zeros({N * K}, DType::i32, device);
  offsets = Tensor::zeros({E + 1}, DType::i32);
  xs = Tensor::zeros({N * K, C}, dtype, device);
  h = Tensor::zeros({N * K, 2 * Fe}, dtype, device);
  if (with_act) act = Tensor::zeros({N * K, Fe}, dtype, device);
  ys = Tensor::zeros({N * K, C}, dtype, device);
  expert_xs = Tensor::zeros({0, C}, dtype, device);
  expert_ys = Tensor::zeros({0, C}, dtype, device);
  if (shared_hidden(config) > 0) shared.allocate(MlpKind::swiglu, B, T, T, C, shared_hidden(config), dtype, device);
  if (config.moe.shared_gate) shared_gate = Tensor::zeros({N, 1}, dtype, device);
  out = Tensor::zeros({B, T_out, C}, dtype, device);
}

void MoeScratch::allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device) {
  const int64_t N = B * T, E = config.moe.num_experts, K = config.moe.top_k, C = config.channels;
  const int64_t Fe = config.moe.expert_hidden, Fs = shared_hidden(config);
  dys = Tensor::zeros({N * K, C}, dtype, device);
  dact = Tensor::zeros({N * K, Fe}, dtype, device);
  dh = Tensor::zeros({N * K, 2 * Fe}, dtype, device);
  dxs = Tensor::zeros({N * K, C}, dtype, device);
  expert_dys = Tensor::zeros({0, C}, dtype, device);
  expert_dxs = Tensor::zeros({0, C}, dtype, device);
  dweights = Tensor::zeros({N, K}, DType::f32, device);
  dlogits = Tensor::zeros({N, E}, dtype, device);
  dpart = Tensor::zeros({B, T, C}, dtype, device);
  if (Fs > 0) shared = MlpScratch{Tensor::zeros({B, T, 2 * Fs}, dtype, device), Tensor::zeros({B, T, Fs}, dtype, device)};
  if (!config.moe.shared_gate) return;
  dshared = Tensor::zeros({B, T, C}, dtype, device);
  dgate = Tensor::zeros({N, 1}, dtype, device);
}

void moe_layer_forward(const ModelConfig& config, const MoeOptions& options, MoeActivations& a, const Tensor& x,
                       const BlockWeights& w, TensorParallel* tp, ExpertParallel* ep, ContextParallel* cp,
                       Fp8Block fp8) {
  // Every row: the router and the experts see all tokens (gathered under sequence parallelism).
  const Tensor input = region_input(x, tp);
  const int64_t C = config.channels, N = input.numel() / C, E = config.moe.num_experts, K = config.moe.top_k;
  const Tensor tokens = input.reshape({N, C});
  Tensor no_bias;
  matmul_forward(a.logits, tokens, w.router, no_bias);
  moe_router_forward(a.experts, a.weights, a.scores, a.lse, a.logits, w.router_bias, score_kind(config),
                     config.moe.renormalize, RouterGroups{config.moe.groups, config.moe.kept_groups});
  if (config.moe.routed_scale != 1.0f) {
    copy_tensor(a.scaled_weights, a.weights);
    scale_inplace(a.scaled_weights, config.moe.routed_scale);
  }
  const int64_t capacity =
      options.capacity_factor > 0.0f ? int64_t(std::ceil(double(options.capacity_factor) * double(N * K) / double(E)))
                                     : 0;
  a.kept = moe_dispatch_plan(a.order, a.offsets, a.experts, E, capacity);
  const int64_t M = a.kept;
  moe_gather(a.xs, tokens, a.order, M, K);
  // The shared experts see every token and no routed row: under expert parallelism they compute while
  // the routed rows travel (Megatron's shared-expert overlap).
  const bool has_shared = w.shared_in.weight.defined();
  const std::function<void()> shared_experts = [&] {
    // Its bias on tp rank 0 only; its partial output joins the experts' in one reduction.
    const LinearWeights shared_out{w.shared_out.weight, row_parallel_bias(w.shared_out.bias, tp)};
    mlp_layer_forward(MlpKind::swiglu, a.shared, input, w.shared_in, shared_out, nullptr, fp8);
    if (w.shared_gate.defined()) matmul_forward(a.shared_gate, tokens, w.shared_gate, no_bias);
  };
  if (has_shared && !ep) shared_experts();
  if (ep) {
    dispatch_to_experts(a, *ep, E, N * K, has_shared ? shared_experts : std::function<void()>());
    ensure_rows(a.h, a.expert_rows);
    ensure_rows(a.act, a.expert_rows);
    ensure_rows(a.expert_ys, a.expert_rows);
  } else {
    a.expert_xs = a.xs, a.expert_ys = a.ys, a.expert_offsets = a.offsets, a.expert_rows = M;
  }
  const int64_t R = a.expert_rows;
  Tensor h = rows(a.h, R), act = rows(a.act, R), ys = rows(a.expert_ys, R);
  const Fp8Linear up = fp8[BlockLinear::experts_in], down = fp8[BlockLinear::experts_out];
  grouped_matmul_forward(h, up.operand(rows(a.expert_xs, R), Fp8Role::input), up.operand(w.experts_in, Fp8Role::weight),
                         a.expert_offsets);
  swiglu_forward(act, h);
  grouped_matmul_forward(ys, down.operand(act, Fp8Role::input), down.operand(w.experts_out, Fp8Role::weight),
                         a.expert_offsets);
  if (ep) return_from_experts(a.ys, a.expert_ys, a, *ep);
  Tensor partial = all_rows_like(a.out, tp);
  Tensor out = partial.reshape({N, C});
  moe_combine(out, a.ys, combine_weights(config, a), a.order, M, K);
  if (w.shared_gate.defined())  // a partial sum's rows gated alike: the group's sum is the gated whole
    sigmoid_gate_add(out, a.shared.out.reshape({N, C}), a.shared_gate);
  else if (has_shared)
    add_inplace(partial, a.shared.out);
  region_output(partial, a.out, tp);
  RouterBalance mine;
  a.losses = moe_router_losses(a.experts, a.scores, a.lse, score_kind(config), &mine);
  a.routed = mine.counts;
  if (!cp) return;
  a.balance = summed_over(*cp, mine);
  const double share = mine.tokens / a.balance.tokens;
  a.losses = RouterLosses{a.balance.aux() * share, a.losses.z * share};
}

void moe_activation_recompute(MoeActivations& a) {
  ensure_rows(a.act, a.expert_rows);  // a buffer shared by the blocks, grown by expert parallelism
  Tensor act = rows(a.act, a.expert_rows);
  swiglu_forward(act, rows(a.h, a.expert_rows));
}

void moe_layer_backward(const ModelConfig& config, Tensor& dx, BlockWeights& g, const Tensor& dout,
                        const MoeActivations& a, const Tensor& x, const BlockWeights& w, MoeLossScales scales,
                        MoeScratch& s, DeferredWeightGrads* deferred, TensorParallel* tp, ExpertParallel* ep,
                        ContextParallel* cp, Fp8Block fp8) {
  const Tensor input = region_input(x, tp), dout_all = region_output_grad(dout, tp);
  const int64_t C = config.channels, N = input.numel() / C, K = config.moe.top_k, M = a.kept;
  const Tensor tokens = input.reshape({N, C}), dtokens_out = dout_all.reshape({N, C});
  Tensor partial = all_rows_like(dx, tp);
  Tensor dtokens = partial.reshape({N, C}), dpart = s.dpart.reshape({N, C});
  moe_combine_backward(s.dys, s.dweights, dtokens_out, a.ys, combine_weights(config, a), a.order, M, K);
  // The combine's weights gradient is its scaled weights'; the router's are routed_scale times smaller.
  if (config.moe.routed_scale != 1.0f) scale_inplace(s.dweights, config.moe.routed_scale);
  // The routing weights' gradient reads the experts' outputs, of which a tp rank holds partial sums.
  if (tp) tp->sum_over_group(s.dweights);
  const int64_t R = a.expert_rows;
  // The shared experts' input gradient goes to s.dpart, added to dx once the routed rows' is written;
  // under expert parallelism it is computed while the routed rows' gradients travel.
  // A gate scales their output's gradient; its own reads their (partial) output, so sums over the group.
  const bool has_shared = w.shared_in.weight.defined(), gated = w.shared_gate.defined();
  if (gated) {
    Tensor dshared = s.dshared.reshape({N, C});
    sigmoid_gate_backward(dshared, s.dgate, dtokens_out, a.shared.out.reshape({N, C}), a.shared_gate);
    if (tp) tp->sum_over_group(s.dgate);
  }
  const Tensor& dshared_out = gated ? s.dshared : dout_all;
  const std::function<void()> shared_experts = [&] {
    mlp_layer_backward(MlpKind::swiglu, s.dpart, g.shared_in, g.shared_out, dshared_out, a.shared, input,
                       w.shared_in, w.shared_out, s.shared, deferred, nullptr, fp8);
  };
  if (has_shared && !ep) shared_experts();
  if (ep) {
    send_to_experts(s.expert_dys, s.dys, a, *ep, has_shared ? shared_experts : std::function<void()>());
    ensure_rows(s.dact, R);
    ensure_rows(s.dh, R);
    ensure_rows(s.expert_dxs, R);
  }
  const Tensor& expert_dys = ep ? s.expert_dys : s.dys;
  Tensor dact = rows(s.dact, R), dh = rows(s.dh, R), expert_dxs = rows(ep ? s.expert_dxs : s.dxs, R);
  const Fp8Linear up = fp8[BlockLinear::experts_in], down = fp8[BlockLinear::experts_out];
  grouped_linear_backward(dact, g.experts_out, down.operand(rows(expert_dys, R), Fp8Role::grad),
                          down.operand(rows(a.act, R), Fp8Role::input), down.operand(w.experts_out, Fp8Role::weight),
                          a.expert_offsets, deferred);
  swiglu_backward(dh, dact, rows(a.h, R));
  grouped_linear_backward(expert_dxs, g.experts_in, up.operand(dh, Fp8Role::grad),
                          up.operand(rows(a.expert_xs, R), Fp8Role::input), up.operand(w.experts_in, Fp8Role::weight),
                          a.expert_offsets, deferred);
  if (ep) return_from_experts(s.dxs, s.expert_dxs, a, *ep);
  moe_gather_backward(dtokens, s.dxs, a.order, M, K);
  if (has_shared) add_inplace(partial, s.dpart);  // s.dpart is free for the router's from here
  // Under cp the load-balancing loss is the whole sequences' (the group's statistics); its scale,
  // set for this rank's N tokens, grows to all of theirs.
  const float aux_scale = cp ? scales.aux * float(a.balance.tokens / double(N)) : scales.aux;
  moe_router_backward(s.dlogits, s.dweights, a.experts, a.weights, a.scores, a.lse, a.logits, score_kind(config),
                      aux_scale, scales.z, cp ? &a.balance : nullptr, config.moe.renormalize);
  linear_backward(dpart, LinearWeights{g.router, Tensor()}, s.dlogits, tokens, w.router, deferred);
  // The router's input gradient is whole on every rank: it joins the ranks' partial sums once; so does the
  // shared experts' gate's.
  const bool first_rank = !tp || tp->place().rank == 0;
  if (first_rank) add_inplace(dtokens, dpart);
  if (gated) {
    linear_backward(dpart, LinearWeights{g.shared_gate, Tensor()}, s.dgate, tokens, w.shared_gate, deferred);
    if (first_rank) add_inplace(dtokens, dpart);
  }
  region_input_grad(partial, dx, tp);
}

std::vector<int64_t> moe_expert_load(const MoeActivations& a) {
  const int32_t* offsets = a.offsets.data<int32_t>();
  std::vector<int64_t> load(size_t(a.offsets.numel() - 1));
  for (size_t e = 0; e < load.size(); ++e) load[e] = offsets[e + 1] - offsets[e];
  return load;
}

}  // namespace tessera
