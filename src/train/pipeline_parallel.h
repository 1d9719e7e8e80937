// Pipeline parallelism for the training loop (issue 8). This rank's Decoder is its stage (a
// DecoderStage of P·V chunks); a step's micro-batches run through the schedule's action table on the
// executor: the first stage reads each micro-batch's tokens, the last its targets and losses, and
// the stages pass activations forward and gradients back over the pp group. The tied embedding's
// gradient is summed between the first stage and the last stage's copy before the update, so both
// copies take the same step. Evaluation runs forward only, chunk by chunk in model order.
#pragma once

#include <functional>

#include "nn/decoder.h"
#include "parallel/pp/pipeline_executor.h"
#include "parallel/pp/pipeline_schedule.h"
#include "parallel/process_grid.h"

namespace tessera {

class PipelineParallel {
 public:
  // `model` is this rank's stage of `schedule`'s P·V chunks; kept by reference.
  PipelineParallel(const ProcessGrid& grid, Decoder& model, PipelineSchedule schedule);

  // Fills micro-batch `micro`'s (micro_batch, T) host token and target tensors.
  using FillMicroBatch = std::function<void(int micro, Tensor& inputs, Tensor& targets)>;
  // Forward and backward of the schedule's micro-batches (gradients accumulate; dloss as in
  // Decoder::forward). Returns the sum of every token's loss on the last stage, 0 elsewhere.
  double train_step(int64_t micro_batch, int64_t seq_len, float dloss, const FillMicroBatch& fill);
  // Forward only over `micro_batches` micro-batches; the same sum, on the last stage.
  double evaluate(int micro_batches, int64_t micro_batch, int64_t seq_len, const FillMicroBatch& fill);
  // After train_step, before the gradients are reduced over dp: sums the tied embedding's gradient
  // between the first and the last stage (a no-op for untied models and P = 1).
  void reduce_tied_embedding();
  // The flat-buffer offsets whose values duplicate another stage's (the last stage's tied copy of
  // the embedding): left out of the grad-norm and of checkpoints. Empty on the other stages.
  OffsetRange duplicate_range() const { return duplicate_; }
  const PipelineRunStats& last_run() const { return last_run_; }
  const PipelineSchedule& schedule() const { return schedule_; }

 private:
  int chunk_index(int chunk) const { return chunk / schedule_.stages; }  // model chunk -> this rank's chunk

  std::shared_ptr<Comm> pp_;
  Decoder& model_;
  PipelineSchedule schedule_;
  OffsetRange duplicate_;
  PipelineRunStats last_run_;
};

}  // namespace tessera
