// The MoE router: shape, dtype and expert-index checks, then dispatch by device. On the GPU the
// forward and backward are kernels; the two scalar losses, wanted on the host, are summed there from
// copies of the routing (N*(E+K+1) values).
#include "ops/moe_router.h"

#include <climits>
#include <cmath>

#include "core/cuda/device.h"
#include "ops/cpu/moe_router_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "ops/cuda/moe_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

struct RouterDims {
  int64_t N, E, K;
};

// rows (N,E) with E > 0 (logits, or scores where there are no logits); experts (N,K) with 0 < K <= E.
RouterDims router_dims(const char* op, const char* rows_name, const Tensor& rows, const Tensor& experts) {
  TS_CHECK(rows.ndim() == 2 && rows.size(1) > 0, op, ": ", rows_name, " must be (N,E) with E > 0 experts, got ",
           shape_string(rows.shape()));
  TS_CHECK(experts.ndim() == 2 && experts.size(0) == rows.size(0), op,
           ": experts must be (N,K) with N = ", rows.size(0), " tokens, got ", shape_string(experts.shape()));
  const RouterDims d{rows.size(0), rows.size(1), experts.size(1)};
  TS_CHECK(d.K > 0 && d.K <= d.E, op, ": experts ", shape_string(experts.shape()), " asks for K = ", d.K,
           " experts per token, which must be in [1, E = ", d.E, "]");
  TS_CHECK(d.E <= INT_MAX, op, ": ", rows_name, " ", shape_string(rows.shape()), " has too many experts for i32 ids");
  return d;
}

// Every experts[n,k] in [0, E): the kernels index rows with them.
void check_expert_range(const char* op, const Tensor& experts, int64_t E) {
  const int32_t* ids = experts.data<int32_t>();
  const int64_t K = experts.size(1);
  for (int64_t a = 0; a < experts.numel(); a++)
    TS_CHECK(ids[a] >= 0 && ids[a] < E, op, ": experts[", a / K, ",", a % K, "] = ", ids[a], " is outside [0, E = ", E,
             ")");
}

bool is_sigmoid(RouterScore kind) { return kind == RouterScore::sigmoid; }

}  // namespace

void moe_router_forward(Tensor& experts, Tensor& weights, Tensor& scores, Tensor& lse, const Tensor& logits,
                        const Tensor& bias, RouterScore kind, bool renormalize, RouterGroups groups) {
  const char* op = "moe_router_forward";
  detail::check_float_dtype(op, "logits", logits);
  const Device device = detail::check_args(op, {{"experts", experts, DType::i32},
                                                {"weights", weights},
                                                {"scores", scores},
                                                {"lse", lse},
                                                {"logits", logits, logits.dtype()},
                                                {"bias", bias, DType::f32, /*optional=*/true}});
  const RouterDims d = router_dims(op, "logits", logits, experts);
  detail::check_shape(op, "weights", weights, {d.N, d.K});
  detail::check_shape(op, "scores", scores, {d.N, d.E});
  detail::check_shape(op, "lse", lse, {d.N});
  TS_CHECK(groups.count >= 1 && d.E % groups.count == 0 && groups.kept >= 1 && groups.kept <= groups.count &&
               (!groups.limits() || !is_sigmoid(kind) || d.E / groups.count >= 2),
           op, ": ", groups.count, " expert groups keeping ", groups.kept, " must divide the ", d.E,
           " experts, keep between 1 and all of them, and under sigmoid scoring hold 2 experts each or more");
  TS_CHECK(!bias.defined() || is_sigmoid(kind), op,
           ": bias must be undefined for softmax scores; the selection bias is for sigmoid routers");
  if (bias.defined()) detail::check_shape(op, "bias", bias, {d.E});
  switch (device) {
    case Device::cpu:
      cpu::moe_router_forward(experts.data<int32_t>(), weights.f32(), scores.f32(), lse.f32(), logits.f32(),
                              bias.defined() ? bias.f32() : nullptr, is_sigmoid(kind), renormalize,
                              groups.limits() ? groups.count : 1, groups.kept, d.N, d.E, d.K);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(logits.dtype(), [&]<typename T>(T) {
        cuda::moe_router_forward(experts.data<int32_t>(), weights.f32(), scores.f32(), lse.f32(),
                                 cuda::typed_data<T>(logits), bias.defined() ? bias.f32() : nullptr, is_sigmoid(kind),
                                 renormalize, groups.limits() ? groups.count : 1, groups.kept, d.N, d.E, d.K,
                                 cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

double RouterBalance::aux() const {
  double sum = 0.0;
  for (size_t e = 0; e < counts.size(); ++e) sum += (counts[e] / tokens) * (prob_sums[e] / tokens);
  return tokens > 0 ? double(counts.size()) * sum : 0.0;
}

RouterLosses moe_router_losses(const Tensor& experts, const Tensor& scores, const Tensor& lse, RouterScore kind,
                               RouterBalance* balance) {
  const char* op = "moe_router_losses";
  const Device device = detail::check_args(op, {{"experts", experts, DType::i32}, {"scores", scores}, {"lse", lse}});
  const RouterDims d = router_dims(op, "scores", scores, experts);
  detail::check_shape(op, "lse", lse, {d.N});
  // Summed on the host: a GPU's routing is copied over first.
  const Tensor host_experts = device == Device::cpu ? experts : tensor_to(experts, Device::cpu);
  const Tensor host_scores = device == Device::cpu ? scores : tensor_to(scores, Device::cpu);
  const Tensor host_lse = device == Device::cpu ? lse : tensor_to(lse, Device::cpu);
  check_expert_range(op, host_experts, d.E);
  RouterBalance stats{std::vector<double>(size_t(d.E)), std::vector<double>(size_t(d.E)), double(d.N)};
  const double z = cpu::moe_router_statistics(stats.counts.data(), stats.prob_sums.data(), host_experts.data<int32_t>(),
                                              host_scores.f32(), host_lse.f32(), is_sigmoid(kind), d.N, d.E, d.K);
  const RouterLosses losses{stats.aux(), z};
  if (balance) *balance = std::move(stats);
  return losses;
}

void moe_router_backward(Tensor& dlogits, const Tensor& dweights, const Tensor& experts, const Tensor& weights,
                         const Tensor& scores, const Tensor& lse, const Tensor& logits, RouterScore kind,
                         float aux_scale, float z_scale, const RouterBalance* balance, bool renormalize) {
  const char* op = "moe_router_backward";
  detail::check_float_dtype(op, "logits", logits);
  const Device device = detail::check_args(op, {{"dlogits", dlogits, logits.dtype()},
                                                {"dweights", dweights},
                                                {"experts", experts, DType::i32},
                                                {"weights", weights},
                                                {"scores", scores},
                                                {"lse", lse},
                                                {"logits", logits, logits.dtype()}});
  const RouterDims d = router_dims(op, "logits", logits, experts);
  detail::check_shape(op, "dlogits", dlogits, {d.N, d.E});
  detail::check_shape(op, "dweights", dweights, {d.N, d.K});
  detail::check_shape(op, "weights", weights, {d.N, d.K});
  detail::check_shape(op, "scores", scores, {d.N, d.E});
  detail::check_shape(op, "lse", lse, {d.N});
  TS_CHECK(!balance || (int64_t(balance->counts.size()) == d.E && balance->tokens > 0), op,
           ": the balance statistics must have one count per expert (", d.E, ") over a positive number of tokens");
  switch (device) {
    case Device::cpu:
      check_expert_range(op, experts, d.E);
      cpu::moe_router_backward(dlogits.f32(), dweights.f32(), experts.data<int32_t>(), weights.f32(), scores.f32(),
                               lse.f32(), logits.f32(), is_sigmoid(kind), renormalize, aux_scale, z_scale, d.N, d.E,
                               d.K,
                               balance ? balance->counts.data() : nullptr, balance ? balance->tokens : 0.0);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      // The experts come from moe_router_forward on the same device (ids in [0, E)).
      // Summed statistics travel to the device as whole counts.
      Tensor counts;
      if (balance) {
        counts = Tensor::zeros({d.E}, DType::i32);
        for (int64_t e = 0; e < d.E; ++e) counts.data<int32_t>()[e] = int32_t(std::llround(balance->counts[size_t(e)]));
        counts = tensor_to(counts, Device::cuda);
      }
      cuda::with_storage_type(logits.dtype(), [&]<typename T>(T) {
        cuda::moe_router_backward(cuda::typed_data<T>(dlogits), dweights.f32(), experts.data<int32_t>(),
                                  weights.f32(), scores.f32(), lse.f32(), cuda::typed_data<T>(logits),
                                  is_sigmoid(kind), renormalize, aux_scale, z_scale, d.N, d.E, d.K,
                                  cuda_compute_stream(),
                                  balance ? counts.data<int32_t>() : nullptr, balance ? balance->tokens : 0.0);
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
