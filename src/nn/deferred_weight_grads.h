// Zero-bubble's split backward (issue 8; ZB-H1 of Qi et al., 2023): a pipeline stage's backward
// first computes only what the previous stage waits for, the input gradients, and records each
// linear layer's weight gradient to run later, in what would be the pipeline's bubbles. A record
// keeps copies of the layer's output gradient and input, whose buffers (backward scratch, shared
// recomputation buffers) are reused before the weight part runs. Norm gains and biases keep their
// (cheap) gradients in the input part.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"
#include "nn/decoder_layout.h"

namespace tessera {

class DeferredWeightGrads {
 public:
  // matmul_backward's weight part: dweight (and dbias, if defined) += from dout and x.
  void add_linear(const LinearWeights& g, const Tensor& dout, const Tensor& x, const Tensor& weight);
  // grouped_matmul_backward's: dweight (E,OC,C) += per expert.
  void add_grouped(const Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                   const Tensor& offsets);
  // Runs every record in order, then forgets them.
  void run();
  bool empty() const { return records_.empty(); }

 private:
  std::vector<std::function<void()>> records_;
};

// A linear layer's backward: whole, or with `deferred` the input gradient dx (may be undefined) now
// and the weight gradient recorded.
void linear_backward(Tensor& dx, const LinearWeights& g, const Tensor& dout, const Tensor& x, const Tensor& weight,
                     DeferredWeightGrads* deferred);
// The same for a grouped (per-expert) linear layer.
void grouped_linear_backward(Tensor& dx, const Tensor& dweight, const Tensor& dout, const Tensor& x,
                             const Tensor& weight, const Tensor& offsets, DeferredWeightGrads* deferred);

}  // namespace tessera
