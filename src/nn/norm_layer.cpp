// LayerNorm or RMSNorm by config.
#include "nn/norm_layer.h"

#include "ops/layernorm.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"

namespace tessera {

void NormActivations::allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device) {
  out = Tensor::zeros({B, T, config.channels}, dtype, device);
  mean = config.norm == NormKind::layernorm ? Tensor::zeros({B, T}, DType::f32, device) : Tensor();
  rstd = Tensor::zeros({B, T}, DType::f32, device);
}

void norm_forward(const ModelConfig& config, NormActivations& a, const Tensor& x, const LinearWeights& w) {
  if (config.norm == NormKind::rmsnorm) return rmsnorm_forward(a.out, a.rstd, x, w.weight, config.norm_eps);
  layernorm_forward(a.out, a.mean, a.rstd, x, w.weight, w.bias);
}

void residual_norm_forward(const ModelConfig& config, Tensor& sum, NormActivations& a, const Tensor& x,
                           const Tensor& branch, const LinearWeights& w) {
  if (config.norm == NormKind::rmsnorm)
    return residual_rmsnorm_forward(sum, a.out, a.rstd, x, branch, w.weight, config.norm_eps);
  residual_layernorm_forward(sum, a.out, a.mean, a.rstd, x, branch, w.weight, w.bias);
}

void norm_backward(const ModelConfig& config, Tensor& dx, LinearWeights& g, const Tensor& dout, const Tensor& x,
                   const LinearWeights& w, const NormActivations& a, GradInto into) {
  if (config.norm == NormKind::rmsnorm) return rmsnorm_backward(dx, g.weight, dout, x, w.weight, a.rstd, into);
  layernorm_backward(dx, g.weight, g.bias, dout, x, w.weight, a.mean, a.rstd, into);
}

}  // namespace tessera
