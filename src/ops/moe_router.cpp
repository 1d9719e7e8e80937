// The MoE router: shape, dtype and expert-index checks, then dispatch by device. No CUDA kernel yet:
// the Device::cuda branches raise fail_no_cuda_kernel.
#include "ops/moe_router.h"

#include <climits>

#include "ops/cpu/moe_router_cpu.h"
#include "ops/op_checks.h"

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
                        const Tensor& bias, RouterScore kind) {
  const char* op = "moe_router_forward";
  const Device device = detail::check_args(op, {{"experts", experts, DType::i32},
                                                {"weights", weights},
                                                {"scores", scores},
                                                {"lse", lse},
                                                {"logits", logits},
                                                {"bias", bias, DType::f32, /*optional=*/true}});
  const RouterDims d = router_dims(op, "logits", logits, experts);
  detail::check_shape(op, "weights", weights, {d.N, d.K});
  detail::check_shape(op, "scores", scores, {d.N, d.E});
  detail::check_shape(op, "lse", lse, {d.N});
  TS_CHECK(!bias.defined() || is_sigmoid(kind), op,
           ": bias must be undefined for softmax scores; the selection bias is for sigmoid routers");
  if (bias.defined()) detail::check_shape(op, "bias", bias, {d.E});
  switch (device) {
    case Device::cpu:
      cpu::moe_router_forward(experts.data<int32_t>(), weights.f32(), scores.f32(), lse.f32(), logits.f32(),
                              bias.defined() ? bias.f32() : nullptr, is_sigmoid(kind), d.N, d.E, d.K);
      return;
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
}

RouterLosses moe_router_losses(const Tensor& experts, const Tensor& scores, const Tensor& lse, RouterScore kind) {
  const char* op = "moe_router_losses";
  const Device device = detail::check_args(op, {{"experts", experts, DType::i32}, {"scores", scores}, {"lse", lse}});
  const RouterDims d = router_dims(op, "scores", scores, experts);
  detail::check_shape(op, "lse", lse, {d.N});
  RouterLosses losses;
  switch (device) {
    case Device::cpu: {
      check_expert_range(op, experts, d.E);
      double values[2];
      cpu::moe_router_losses(values, experts.data<int32_t>(), scores.f32(), lse.f32(), is_sigmoid(kind), d.N, d.E, d.K);
      losses.aux = values[0];
      losses.z = values[1];
      return losses;
    }
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
  return losses;
}

void moe_router_backward(Tensor& dlogits, const Tensor& dweights, const Tensor& experts, const Tensor& weights,
                         const Tensor& scores, const Tensor& lse, const Tensor& logits, RouterScore kind,
                         float aux_scale, float z_scale) {
  const char* op = "moe_router_backward";
  const Device device = detail::check_args(op, {{"dlogits", dlogits},
                                                {"dweights", dweights},
                                                {"experts", experts, DType::i32},
                                                {"weights", weights},
                                                {"scores", scores},
                                                {"lse", lse},
                                                {"logits", logits}});
  const RouterDims d = router_dims(op, "logits", logits, experts);
  detail::check_shape(op, "dlogits", dlogits, {d.N, d.E});
  detail::check_shape(op, "dweights", dweights, {d.N, d.K});
  detail::check_shape(op, "weights", weights, {d.N, d.K});
  detail::check_shape(op, "scores", scores, {d.N, d.E});
  detail::check_shape(op, "lse", lse, {d.N});
  switch (device) {
    case Device::cpu:
      check_expert_range(op, experts, d.E);
      cpu::moe_router_backward(dlogits.f32(), dweights.f32(), experts.data<int32_t>(), weights.f32(), scores.f32(),
                               lse.f32(), logits.f32(), is_sigmoid(kind), aux_scale, z_scale, d.N, d.E, d.K);
      return;
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
}

}  // namespace tessera
