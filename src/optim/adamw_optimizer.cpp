// AdamW step: one fused update per parameter tensor (ops/adamw), decay chosen per parameter.
#include "optim/adamw_optimizer.h"

#include "ops/adamw.h"

namespace tessera {

AdamW::AdamW(const ParameterLayout& layout, const AdamWConfig& config)
    : layout_(layout), config_(config), m_(Tensor::zeros({layout.total()})), v_(Tensor::zeros({layout.total()})) {}

void AdamW::step(Tensor& params, const Tensor& grads, float lr, float grad_scale) {
  ++steps_;
  for (const ParamSpec& spec : layout_.specs()) {
    Tensor p = params.view(spec.offset, {spec.numel()});
    Tensor g = grads.view(spec.offset, {spec.numel()});
    Tensor m = m_.view(spec.offset, {spec.numel()});
    Tensor v = v_.view(spec.offset, {spec.numel()});
    AdamWParams hp{lr, config_.beta1, config_.beta2, config_.eps,
                   spec.decayed() ? config_.weight_decay : 0.0f, grad_scale, steps_};
    adamw_update(p, g, m, v, hp);
  }
}

}  // namespace tessera
