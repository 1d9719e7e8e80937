// Recording and running deferred weight gradients.
#include "nn/deferred_weight_grads.h"

#include "core/cuda/device.h"
#include "ops/grouped_matmul.h"
#include "ops/matmul.h"

namespace tessera {
namespace {

Tensor copy_of(const Tensor& t) {
  Tensor copy = Tensor::zeros(t.shape(), t.dtype(), t.device());
  copy_tensor(copy, t);
  return copy;
}

}  // namespace

void DeferredWeightGrads::add_linear(const LinearWeights& g, const Tensor& dout, const Tensor& x,
                                     const Tensor& weight) {
  records_.push_back([g = LinearWeights(g), dout = copy_of(dout), x = copy_of(x), weight]() mutable {
    Tensor no_dx;
    matmul_backward(no_dx, g.weight, g.bias, dout, x, weight);
  });
}

void DeferredWeightGrads::add_grouped(const Tensor& dweight, const Tensor& dout, const Tensor& x,
                                      const Tensor& weight, const Tensor& offsets) {
  records_.push_back([dweight = Tensor(dweight), dout = copy_of(dout), x = copy_of(x), weight, offsets = copy_of(offsets)]() mutable {
    Tensor no_dx;
    grouped_matmul_backward(no_dx, dweight, dout, x, weight, offsets);
  });
}

void DeferredWeightGrads::run() {
  for (std::function<void()>& record : records_) record();
  records_.clear();
}

void linear_backward(Tensor& dx, const LinearWeights& g, const Tensor& dout, const Tensor& x, const Tensor& weight,
                     DeferredWeightGrads* deferred) {
  LinearWeights grads = g;
  if (!deferred) return matmul_backward(dx, grads.weight, grads.bias, dout, x, weight);
  Tensor no_dweight, no_dbias;
  matmul_backward(dx, no_dweight, no_dbias, dout, x, weight);
  deferred->add_linear(g, dout, x, weight);
}

void grouped_linear_backward(Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                             const Tensor& weight, const Tensor& offsets, DeferredWeightGrads* deferred) {
  Tensor grads = dweight;
  if (!deferred) return grouped_matmul_backward(dx, grads, dout, x, weight, offsets);
  Tensor no_dweight;
  grouped_matmul_backward(dx, no_dweight, dout, x, weight, offsets);
  deferred->add_grouped(dweight, dout, x, weight, offsets);
}

}  // namespace tessera
