// Tensor parallelism's communication (issue 8): the mappings at the edges of a tensor-parallel region,
// named for what they do forward and backward, over the grid's tp group (Megatron's
// copy_to_tensor_model_parallel_region and reduce_from_tensor_model_parallel_region):
//   copy_to_region       forward: copy (nothing to do)   backward: all-reduce the input gradient
//   reduce_from_region   forward: all-reduce             backward: copy (nothing to do)
// and with sequence parallelism
//   gather_to_region     forward: all-gather the rows     backward: reduce-scatter
//   scatter_from_region  forward: reduce-scatter          backward: all-gather the rows
// and the all-reduces of the vocabulary-parallel cross-entropy's per-row statistics. The decoder's
// layers call them through nn/tensor_parallel.h; a group of one rank does no communication.
#pragma once

#include <memory>

#include "nn/tensor_parallel.h"
#include "parallel/comm.h"

namespace tessera {

class TpMappings final : public TensorParallel {
 public:
  TpMappings(std::shared_ptr<Comm> tp, bool sequence_parallel);
  TpPlace place() const override { return {tp_->rank(), tp_->size()}; }
  void copy_to_region_backward(Tensor& input_grad) override { tp_->all_reduce(input_grad); }
  void reduce_from_region_forward(Tensor& partial) override { tp_->all_reduce(partial); }
  void max_over_group(Tensor& values) override { tp_->all_reduce(values, ReduceOp::max); }
  void sum_over_group(Tensor& values) override { tp_->all_reduce(values); }
  bool sequence_parallel() const override { return sequence_parallel_; }
  void gather_to_region_forward(const Tensor& local, Tensor& whole) override { tp_->all_gather(local, whole); }
  void gather_to_region_backward(const Tensor& whole_grad, Tensor& local) override {
    tp_->reduce_scatter(whole_grad, local);
  }
  void scatter_from_region_forward(const Tensor& partial, Tensor& local) override { tp_->reduce_scatter(partial, local); }
  void scatter_from_region_backward(const Tensor& local_grad, Tensor& whole) override {
    tp_->all_gather(local_grad, whole);
  }

 private:
  std::shared_ptr<Comm> tp_;
  bool sequence_parallel_;
};

}  // namespace tessera
