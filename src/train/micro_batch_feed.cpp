// A rank's share of a micro-batch and its document starts (contract in train/micro_batch_feed.h).
#include "train/micro_batch_feed.h"

#include "core/cuda/device.h"
#include "data/document_starts.h"

namespace tessera {

MicroBatchFeed::MicroBatchFeed(int64_t micro_batch, int64_t seq_len, const ContextParallel* cp,
                               std::optional<int32_t> document_start)
    : cp_(cp),
      document_start_(document_start),
      inputs_(Tensor::zeros({micro_batch, seq_len}, DType::i32)),
      targets_(Tensor::zeros({micro_batch, seq_len}, DType::i32)) {}

Tensor MicroBatchFeed::local(const Tensor& whole) const { return cp_ ? cp_local_tokens(whole, cp_->place()) : whole; }

Tensor MicroBatchFeed::local_doc_starts(const Tensor& inputs) const {
  return document_start_ ? local(document_starts(inputs, *document_start_)) : Tensor();
}

double MicroBatchFeed::forward(Decoder& model, float dloss) const {
  const double share = model.forward(local(inputs_), local(targets_), dloss, local_doc_starts(inputs_));
  return cp_ ? share / cp_->place().size : share;
}

PipelineParallel::FillMicroBatch MicroBatchFeed::pipeline_filler(FillTokens fill) {
  return [this, fill](int m, Tensor& inputs, Tensor& targets, Tensor& doc_starts) {
    if (!cp_) {
      fill(m, inputs, targets);
      doc_starts = local_doc_starts(inputs);
      return;
    }
    fill(m, inputs_, targets_);  // the whole sequences, then this rank's share of each
    copy_tensor(inputs, local(inputs_));
    copy_tensor(targets, local(targets_));
    doc_starts = local_doc_starts(inputs_);
  };
}

}  // namespace tessera
