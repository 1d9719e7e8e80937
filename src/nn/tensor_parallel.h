// Tensor parallelism as the decoder's layers see it (issue 8, Megatron-style): a rank's place in
// the tp group, the shapes its layers compute with (its share of the heads, of the MLP and expert
// widths, of the vocabulary), and the mappings at the edges of a tensor-parallel region, which
// parallel/tp implements over the tp group (nn holds no collectives).
//   copy_to_region        forward: the replicated input passes;  backward: sum of the ranks' input gradients
//   reduce_from_region    forward: sum of the ranks' partial outputs;  backward: the gradient passes
// Column-parallel layers (QKV, MLP up/gate, experts' up/gate, the vocabulary of the embedding and the
// classifier) hold rows of the whole weight; row-parallel layers (attention output, MLP down) hold
// columns and produce partial sums. Norms, positions, routers and row-parallel biases are replicated;
// their gradients come out equal on every rank because each computes them from the same values.
// Sequence parallelism: outside the regions (norms, residual adds) a rank holds 1/size of every
// (B,T,C) activation's rows, rows [rank·BT/size, (rank+1)·BT/size) of the flattened B·T, as a
// (B, T/size, C) tensor; the region mappings become
//   gather_to_region      forward: all-gather the rows;  backward: reduce-scatter the input gradient
//   scatter_from_region   forward: reduce-scatter the partial outputs;  backward: all-gather the gradient
// and the norms' parameter gradients, each rank's from its rows, are summed over the group after backward.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "nn/model_config.h"

namespace tessera {

struct TpPlace {
  int rank = 0, size = 1;
};

class TensorParallel {
 public:
  virtual ~TensorParallel() = default;
  virtual TpPlace place() const = 0;
  // The backward half of copy_to_region: in place, the sum over the group.
  virtual void copy_to_region_backward(Tensor& input_grad) = 0;
  // The forward half of reduce_from_region: in place, the sum over the group.
  virtual void reduce_from_region_forward(Tensor& partial) = 0;
  // For the vocabulary-parallel cross-entropy's per-row statistics: in place, the max or the sum over the group.
  virtual void max_over_group(Tensor& values) = 0;
  virtual void sum_over_group(Tensor& values) = 0;
  // Sequence parallelism: whether it is on, and its mappings' halves over the rows of (B, T/size, W)
  // slices and the (B, T, W) whole.
  virtual bool sequence_parallel() const = 0;
  virtual void gather_to_region_forward(const Tensor& local, Tensor& whole) = 0;        // all-gather
  virtual void gather_to_region_backward(const Tensor& whole_grad, Tensor& local) = 0;  // reduce-scatter
  virtual void scatter_from_region_forward(const Tensor& partial, Tensor& local) = 0;   // reduce-scatter
  virtual void scatter_from_region_backward(const Tensor& local_grad, Tensor& whole) = 0;  // all-gather
};

// The layers' side of a region's edges, in either mode (and without tensor parallelism: `tp` null).
// Forward: the region's input, every row (x itself, or its rows gathered into a new tensor) ...
Tensor region_input(const Tensor& x, TensorParallel* tp);
// ... where the region writes its partial output (`out` itself, or a new tensor of every row) ...
Tensor all_rows_like(const Tensor& out, const TensorParallel* tp);
// ... and the partial output summed into `out` (all-reduce in place, or reduce-scatter).
void region_output(Tensor& partial, Tensor& out, TensorParallel* tp);
// Backward: the output's gradient, every row (dout itself, or gathered) ...
Tensor region_output_grad(const Tensor& dout, TensorParallel* tp);
// ... and the input's partial gradient (`partial`, from all_rows_like(dx)) summed into dx.
void region_input_grad(Tensor& partial, Tensor& dx, TensorParallel* tp);

// The bias a row-parallel layer adds to its partial output: tp rank 0's only, so that the reduced
// sum holds it once (its gradient, the column sums of the replicated output gradient, is the same
// on every rank).
inline Tensor row_parallel_bias(const Tensor& bias, const TensorParallel* tp) {
  return tp == nullptr || tp->place().rank == 0 ? bias : Tensor();
}

// The shapes one tp rank's layers compute with: 1/size of the query heads, of the key/value heads
// (or, when size exceeds them, one kv head replicated on size / kv ranks, Megatron's rule), of the
// dense MLP, expert and shared-expert widths; the head size kept. Throws naming the numbers when
// size does not divide them (or the padded vocabulary).
ModelConfig tp_local_config(const ModelConfig& config, TpPlace tp);
// How many tp ranks hold each kv head: 1, or size / kv heads when size exceeds them.
int64_t kv_head_replicas(const ModelConfig& config, TpPlace tp);

}  // namespace tessera
