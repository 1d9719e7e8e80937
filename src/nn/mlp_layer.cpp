// Dense MLP forward and backward, composed from ops/.
#include "nn/mlp_layer.h"

#include "ops/gelu.h"
#include "ops/matmul.h"
#include "ops/swiglu.h"

namespace tessera {
namespace {

GateActivation gate_of(MlpKind kind) {
  return kind == MlpKind::geglu ? GateActivation::gelu_tanh : GateActivation::silu;
}

}  // namespace

void MlpActivations::allocate(MlpKind kind, int64_t B, int64_t T, int64_t T_out, int64_t C, int64_t F, DType dtype,
                              Device device, bool with_act) {
  h = Tensor::zeros({B, T, is_gated(kind) ? 2 * F : F}, dtype, device);
  if (with_act) act = Tensor::zeros({B, T, F}, dtype, device);
  out = Tensor::zeros({B, T_out, C}, dtype, device);
}

void mlp_layer_forward(MlpKind kind, MlpActivations& a, const Tensor& x, const LinearWeights& in,
                       const LinearWeights& out, TensorParallel* tp, Fp8Block fp8) {
  const Fp8Linear up = fp8[BlockLinear::mlp_in], down = fp8[BlockLinear::mlp_out];
  const Tensor input = up.operand(region_input(x, tp), Fp8Role::input), in_weight = up.operand(in.weight, Fp8Role::weight);
  if (kind == MlpKind::gelu) {
    matmul_gelu_forward(a.act, a.h, input, in_weight, in.bias);
  } else if (kind == MlpKind::gelu_exact) {
    matmul_forward(a.h, input, in_weight, in.bias);
    gelu_forward(a.act, a.h, GeluForm::exact);
  } else {
    matmul_forward(a.h, input, in_weight, in.bias);
    swiglu_forward(a.act, a.h, gate_of(kind));
  }
  Tensor partial = all_rows_like(a.out, tp);
  matmul_forward(partial, down.operand(a.act, Fp8Role::input), down.operand(out.weight, Fp8Role::weight),
                 row_parallel_bias(out.bias, tp));
  region_output(partial, a.out, tp);
}

void mlp_activation_recompute(MlpKind kind, MlpActivations& a) {
  if (!is_gated(kind)) return gelu_forward(a.act, a.h, kind == MlpKind::gelu ? GeluForm::tanh : GeluForm::exact);
  swiglu_forward(a.act, a.h, gate_of(kind));
}

void mlp_layer_backward(MlpKind kind, Tensor& dx, LinearWeights& g_in, LinearWeights& g_out, const Tensor& dout,
                        const MlpActivations& a, const Tensor& x, const LinearWeights& in, const LinearWeights& out,
                        MlpScratch& scratch, DeferredWeightGrads* deferred, TensorParallel* tp, Fp8Block fp8) {
  const Fp8Linear up = fp8[BlockLinear::mlp_in], down = fp8[BlockLinear::mlp_out];
  const Tensor dout_all = down.operand(region_output_grad(dout, tp), Fp8Role::grad);
  const Tensor act = down.operand(a.act, Fp8Role::input), out_weight = down.operand(out.weight, Fp8Role::weight);
  if (kind == MlpKind::gelu) {
    LinearWeights none;  // with `deferred`, the weight part waits there
    LinearWeights& now = deferred ? none : g_out;
    matmul_backward_dgelu(scratch.dh, now.weight, now.bias, dout_all, act, out_weight, a.h);
    if (deferred) deferred->add_linear(g_out, dout_all, act, out_weight);
  } else if (kind == MlpKind::gelu_exact) {  // through act's gradient in dh, then in place
    linear_backward(scratch.dh, g_out, dout_all, act, out_weight, deferred);
    gelu_backward(scratch.dh, scratch.dh, a.h, GeluForm::exact);
  } else {
    linear_backward(scratch.dact, g_out, dout_all, act, out_weight, deferred);
    swiglu_backward(scratch.dh, scratch.dact, a.h, gate_of(kind));
  }
  Tensor partial = all_rows_like(dx, tp);
  linear_backward(partial, g_in, up.operand(scratch.dh, Fp8Role::grad), up.operand(region_input(x, tp), Fp8Role::input),
                  up.operand(in.weight, Fp8Role::weight), deferred);
  region_input_grad(partial, dx, tp);
}

}  // namespace tessera
