// Data parallelism for the training loop, over the grid's dp group (size 1 takes the same path and
// communicates nothing); under context parallelism gradients, shards and sums span dp×cp, whose
// ranks hold the same parameters. ZeRO 0 and 1: gradients accumulate in the model's flat buffer and
// the last micro-batch's are reduced in buckets while its backward runs; ZeRO-1 shards the optimizer
// state (and the reduced gradient) over dp and all-gathers the updated parameters. ZeRO-2 shards the
// gradients too (parallel/dp/part_grad_reducer.h): every backward writes each part's gradient into a
// buffer of its own and reduce-scatters it into the shard when the part is done (DeepSpeed's
// stage 2: a reduction per micro-batch, no whole gradient ever). ZeRO-3 shards the parameters too
// (parallel/dp/zero3_parameters.h): the model gathers each part around its use, and the optimizer
// updates the parameter shard. Also the global reductions the loop reports: loss sums
// and the grad-norm. Under expert parallelism the expert weights (other experts on every ep rank)
// reduce over the expert_dp group instead, in buckets of their own.
#pragma once

#include <memory>

#include "nn/decoder.h"
#include "optim/adamw_optimizer.h"
#include "parallel/dp/grad_reducer.h"
#include "parallel/dp/part_grad_reducer.h"
#include "parallel/dp/zero3_parameters.h"
#include "parallel/group_sum.h"
#include "parallel/process_grid.h"

namespace tessera {

struct DataParallelOptions {
  int zero_stage = 0;
  int64_t bucket_bytes = 25 << 20;
  bool overlap = true;
  DType reduce_dtype = DType::f32;  // the gradients' dtype on the wire: f32, or bf16 (compressed)
  int powersgd_rank = 0;            // > 0: PowerSGD compression of that rank (ZeRO 0-1, f32 on the wire)
  bool reshard_after_forward = true;  // ZeRO-3: Decoder::set_sharded_parameters' reshard_after_forward
};

// The reduction buckets over `layout`: whole parameters of about options.bucket_bytes, cut from the
// end, the expert weights in `experts` in buckets of their own reduced over groups[1] (expert_dp),
// everything else over groups[0] (dp×cp); under ZeRO 2 and 3 one bucket per part (the embeddings,
// each block, the final norm with the head) and group, whatever the bucket size.
std::vector<Bucket> parameter_buckets(const ParameterLayout& layout, const DataParallelOptions& options,
                                      const std::vector<OffsetRange>& experts, const std::vector<ReduceGroup>& groups);
// The layout's gradients as matrices for PowerSGD (a tensor of more than two dimensions as its first
// dimension by the rest).
std::vector<GradMatrix> gradient_matrices(const ParameterLayout& layout);

// A rank's fp32 parameter bytes: those it keeps between steps (the flat buffer, or its ZeRO-3
// shard), and the most it held at once (with ZeRO-3's gathered parts).
struct ParamMemory {
  int64_t persistent_bytes = 0, peak_bytes = 0;
};

class DataParallel {
 public:
  // The reduction state lives on `device`, where the step runs. Under ZeRO-3 this object's shards
  // there take the parameters: from `zero3_values` when the model was built without them
  // (ParamStorage::sharded_later: no rank ever holds the whole model), else from the model's own,
  // wherever it holds them (built or loaded on the host, a model is sharded before it moves, and
  // Decoder::to then moves no parameters, so the device never holds the whole model).
  DataParallel(const ProcessGrid& grid, Decoder& model, const DataParallelOptions& options, Device device,
               const ParameterValues& zero3_values = {});

  // This rank's place among the data-parallel ranks (which batch shares it takes).
  int rank() const { return dp_->rank(); }
  int size() const { return dp_->size(); }
  // The ranks holding the same parameters as this one (dp×cp), over which sum() adds.
  int replicas() const { return replicas_->size(); }
  int zero_stage() const { return options_.zero_stage; }
  // The optimizer's segments: every parameter (ZeRO 0) or this rank's shard (ZeRO 1/2/3; under
  // ZeRO-3 they address the parameter shard, laid out like the state); with the rounding keys of
  // bf16 moments (optim/rounding_keys.h) when asked.
  std::vector<OptimSegment> optimizer_segments(bool rounding_keys = false) const;
  // The same state in the model's flat layout (what checkpoints read and write): optimizer_segments()
  // but for ZeRO-3's parameter offsets.
  std::vector<OptimSegment> moment_segments() const;
  // What the optimizer updates: the model's flat parameters, or this rank's ZeRO-3 shard of them.
  Tensor& optimizer_params() { return zero3_ ? zero3_->params_shard() : model_.params(); }

  // Whether every backward reduces its parts' gradients itself (ZeRO 2 and 3).
  bool reduces_by_part() const { return part_grads_ != nullptr; }
  // Call before the backward whose gradients complete the step: buckets then reduce as they finish.
  // (A no-op when backward reduces by part.)
  void reduce_during_next_backward();
  // The same announcement backward makes, from elsewhere (a pipeline's chunks): every gradient at
  // a flat offset >= `offset` is final; the buckets now complete start reducing.
  // (A no-op when backward reduces by part.)
  void grads_final_from(int64_t offset) {
    if (!part_grads_) reducer_.grads_final_from(offset);
  }
  // Waits for (and starts what is left of) the reduction; returns the seconds spent waiting.
  double finish_reduction();
  // ZeRO 2 and 3, after finish_reduction(): the reduced gradient of `range` (within one part of the
  // layout), whole on every dp rank, handed to `edit`, whose result lands back in the shards.
  void edit_reduced_grads(OffsetRange range, const std::function<void(Tensor&)>& edit);
  // The reduced gradient the optimizer reads: the full buffer (ZeRO 0) or the shard (ZeRO 1/2/3).
  const Tensor& optimizer_grads() const;
  // The global gradient norm, exact under sharding.
  float grad_norm();
  // Its square over this stage's parameters, leaving out the elements in `excluded` (duplicates of
  // parameters another rank counts: a pipeline stage's tied copy, a tp rank's replicated ones);
  // summed over dp under sharding.
  double squared_grad_norm(const std::vector<OffsetRange>& excluded = {});
  // ZeRO 0 and 1's reduction, whose PowerSGD state checkpoints save and restore.
  GradReducer& grad_reducer() { return reducer_; }
  // The step was skipped (non-finite or spiking gradients): compression state built from them is dropped.
  void step_skipped() { reducer_.step_skipped(); }
  // After the optimizer step: all-gather the updated parameters under ZeRO.
  void after_update();
  // Collective over dp under ZeRO-3: every rank that passes `full` defined (layout total) receives
  // the whole flat parameters into it. Without ZeRO-3, rank 0 copies its own.
  void gather_params(Tensor& full);
  // This rank's parameter bytes since the last call (which starts a new peak).
  ParamMemory param_memory();
  // Sum of a value (of each value) over the dp×cp group.
  double sum(double value);
  std::vector<double> sum(const std::vector<double>& values);
  // The parameter elements this rank writes to a checkpoint, as segments of its optimizer state: its
  // ZeRO shard, or under ZeRO 0 (every rank holding every moment) the rank-th of the dp×cp ranks' contiguous
  // ranges of the flat buffer, so that the ranks share the writing.
  // Leaves out the elements in `excluded`: another rank writes them.
  std::vector<OptimSegment> checkpoint_segments(const std::vector<OffsetRange>& excluded = {}) const;

 private:
  std::shared_ptr<Comm> dp_;
  std::shared_ptr<Comm> replicas_;  // the ranks holding the same parameters, dp×cp: reductions and sums
  std::shared_ptr<Comm> ep_;
  Decoder& model_;
  DataParallelOptions options_;
  std::vector<OffsetRange> experts_;  // the expert weights, under expert parallelism
  GradReducer reducer_;  // ZeRO 0 and 1's reduction; the buckets (and the updated parameters' all-gather) of all
  Tensor shard_;  // ZeRO: this rank's part of the reduced gradient
  std::unique_ptr<PartGradReducer> part_grads_;  // ZeRO 2 and 3's reduction by part
  std::unique_ptr<Zero3Parameters> zero3_;  // ZeRO-3's parameter shards, which the model gathers from
};

}  // namespace tessera
