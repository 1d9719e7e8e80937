// The pipeline layout of a run, its errors in the flags' terms.
#include "train/pipeline_plan.h"

#include <string>

#include "core/error.h"

namespace tessera {

PipelinePlan plan_pipeline(const TrainConfig& config, const ModelConfig& model, int dp) {
  const int P = config.pp, V = config.virtual_stages, chunks = P * V;
  const int64_t micro_batch = config.micro_batch(dp);
  const int64_t micro_batches = config.batch_size / (int64_t(dp) * micro_batch);
  PipelinePlan plan;
  plan.boundaries = config.pipeline_boundaries.empty()
                        ? balanced_boundaries(model, config.seq_len, chunks)
                        : explicit_boundaries(config.pipeline_boundaries, model.num_layers, chunks);
  try {
    plan.schedule = make_pipeline_schedule(parse_schedule_kind(config.pipeline_schedule), P, int(micro_batches), V);
  } catch (const Error& e) {
    // The schedule counts micro-batches; the user sets them through the batch flags.
    throw Error(std::string(e.what()) + " (micro-batches per step: --batch-size " + std::to_string(config.batch_size) +
                    " / (--dp " + std::to_string(dp) + " × --micro-batch-size " + std::to_string(micro_batch) +
                    ") = " + std::to_string(micro_batches) + ")",
                e.where());
  }
  return plan;
}

}  // namespace tessera
