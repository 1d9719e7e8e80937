// What a rank feeds its model for a micro-batch of whole sequences (B,T): under context parallelism its
// share of every sequence (nn/context_parallel.h), and under --attention-mask document the document
// starts of what it feeds (data/document_starts.h; true positions under context parallelism), taken
// from the whole sequences. The same for a plain forward and for a pipeline's micro-batch filler.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "core/tensor.h"
#include "nn/context_parallel.h"
#include "nn/decoder.h"
#include "train/pipeline_parallel.h"

namespace tessera {

class MicroBatchFeed {
 public:
  // cp: the cp group's attention, or null; document_start: the token that starts a document under
  // document masks, or none. Buffers of (micro_batch, seq_len) whole sequences.
  MicroBatchFeed(int64_t micro_batch, int64_t seq_len, const ContextParallel* cp,
                 std::optional<int32_t> document_start);
  // Whole-sequence token and target buffers a caller fills for forward().
  Tensor& inputs() { return inputs_; }
  Tensor& targets() { return targets_; }
  // model.forward() of inputs() and targets(): returns the rank's share of the mean token loss (over cp
  // the shares sum to the sequences' mean).
  double forward(Decoder& model, float dloss) const;
  // Fills micro-batch m's (B,T) host token and target tensors with whole sequences.
  using FillTokens = std::function<void(int m, Tensor& inputs, Tensor& targets)>;
  // A pipeline's micro-batch filler: `fill`, under context parallelism into the whole-sequence buffers
  // and then this rank's share into the pipeline's (B, T/cp) ones; with the document starts.
  PipelineParallel::FillMicroBatch pipeline_filler(FillTokens fill);

 private:
  // The document starts of whole sequences `inputs`, this rank's share of them; undefined without masks.
  Tensor local_doc_starts(const Tensor& inputs) const;
  Tensor local(const Tensor& whole) const;  // this rank's share of (B,T) whole sequences

  const ContextParallel* cp_;
  std::optional<int32_t> document_start_;
  Tensor inputs_, targets_;  // (micro_batch, T) i32
};

}  // namespace tessera
