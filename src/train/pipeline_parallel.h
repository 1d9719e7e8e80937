// Pipeline parallelism for the training loop (issue 8). This rank's Decoder is its stage (a
// DecoderStage of P·V chunks); a step's micro-batches run through the schedule's action table on the
// executor: the first stage reads each micro-batch's tokens, the last its targets and losses, and
// the stages pass activations forward and gradients back over the pp group. The tied embedding's
// gradient is summed between the first stage and the last stage's copy before the update, so both
// copies take the same step. Evaluation runs forward only, chunk by chunk in model order.
#pragma once

#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/decoder.h"
#include "parallel/pp/pipeline_executor.h"
#include "parallel/pp/pipeline_schedule.h"
#include "parallel/process_grid.h"
#include "train/data_parallel.h"

namespace tessera {

class PipelineParallel {
 public:
  // `model` is this rank's stage of `schedule`'s P·V chunks; kept by reference.
  PipelineParallel(const ProcessGrid& grid, Decoder& model, PipelineSchedule schedule);

  // Fills micro-batch `micro`'s (micro_batch, T) host token and target tensors, and its document starts
  // under document masking (left undefined otherwise); every stage asks, since every stage's attention
  // reads the starts.
  using FillMicroBatch = std::function<void(int micro, Tensor& inputs, Tensor& targets, Tensor& doc_starts)>;
  // Forward and backward of the schedule's micro-batches (gradients accumulate; dloss as in
  // Decoder::forward). Returns the sum of every token's loss on the last stage, 0 elsewhere. When
  // given, grads_final_from is told each new watermark as chunks finish their last backward: every
  // gradient at a flat offset >= it is final (the embedding and a tied copy, before the first
  // block, never are: their sum over the end stages comes after), so a dp reduction can start.
  double train_step(int64_t micro_batch, int64_t seq_len, float dloss, const FillMicroBatch& fill,
                    const std::function<void(int64_t)>& grads_final_from = nullptr);
  // Forward only over `micro_batches` micro-batches; the same sum, on the last stage, of the first
  // `counted` of them (the rest run for the collectives other ranks' layers share with these).
  // `token_losses`, when given, sees each counted micro-batch's per-token losses (B,T) on the last
  // stage, on the model's device.
  using TokenLosses = std::function<void(int micro, const Tensor& losses)>;
  double evaluate(int micro_batches, int counted, int64_t micro_batch, int64_t seq_len, const FillMicroBatch& fill,
                  const TokenLosses& token_losses = nullptr);
  // Sums the tied embedding's gradient between the first and the last stage (a no-op for untied
  // models, P = 1 and the stages between). Call it after train_step, before the gradients are
  // reduced over dp; under ZeRO-3, whose backward reduced every micro-batch's gradients already,
  // after dp's reduction instead: then it sums the reduced gradient in dp's shards.
  void reduce_tied_embedding(DataParallel& dp);
  // The flat-buffer offsets whose values duplicate another stage's (the last stage's tied copy of
  // the embedding): left out of the grad-norm and of checkpoints. Empty on the other stages.
  OffsetRange duplicate_range() const { return duplicate_; }
  const PipelineRunStats& last_run() const { return last_run_; }
  // This rank's part of the step's all-reduce (summed over every rank): per stage its compute time,
  // its time in the executor, its most micro-batches in flight and its peak memory (P entries each),
  // then per stage the compute time and count of each kind of compute action (8 entries each).
  std::vector<double> step_values() const;
  size_t step_values_size() const { return 12 * size_t(schedule_.stages); }
  // From the sums of step_values() over `dp` replicas of every stage: the measured bubble (the idle
  // share of the stages' time in the executor), the simulator's bubble for this schedule at each
  // stage's measured mean compute times, each stage's peak micro-batches in flight, measured and
  // simulated, and its peak memory (MB, the mean over its dp replicas).
  nlohmann::json step_metrics(const double* sums, int dp) const;
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
