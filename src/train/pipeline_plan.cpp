// The pipeline layout of a run, its errors in the flags' terms.
#include "train/pipeline_plan.h"

#include <string>

#include "core/divisors.h"
#include "core/error.h"

namespace tessera {

PipelinePlan plan_pipeline(const TrainConfig& config, const ModelConfig& model, int dp) {
  const int P = config.pp, V = config.virtual_stages, chunks = P * V;
  const int64_t micro_batch = config.micro_batch(dp);
  const int64_t micro_batches = config.batch_size / (int64_t(dp) * micro_batch);
  TS_CHECK(micro_batches <= kMaxScheduleSlots / chunks, "a step has --batch-size ", config.batch_size, " / (--dp ", dp,
           " × --micro-batch-size ", micro_batch, ") = ", micro_batches, " micro-batches, more than a schedule of ",
           chunks, " pipeline chunks holds (", kMaxScheduleSlots / chunks, "); raise --micro-batch-size or lower ",
           "--batch-size");
  PipelinePlan plan;
  plan.boundaries = config.pipeline_boundaries.empty()
                        ? balanced_boundaries(model, config.seq_len, chunks)
                        : explicit_boundaries(config.pipeline_boundaries, model.num_layers, chunks);
  const ScheduleKind kind = parse_schedule_kind(config.pipeline_schedule);
  if (kind == ScheduleKind::interleaved && micro_batches % P != 0) {
    // In the batch flags' terms: the largest micro-batch size that gives a multiple of P, if any.
    const int64_t share = config.batch_size / dp;
    int64_t fitting = 0;
    for (const int64_t m : divisors_up_to(share, micro_batch))
      if ((share / m) % P == 0) {
        fitting = m;
        break;
      }
    const std::string fix = fitting > 0 ? "use --micro-batch-size " + std::to_string(fitting)
                                        : "use a --batch-size that is a multiple of --dp × --pp = " + std::to_string(dp * P);
    TS_FAIL("the interleaved schedule runs micro-batches in groups of --pp ", P, ", but a step has --batch-size ",
            config.batch_size, " / (--dp ", dp, " × --micro-batch-size ", micro_batch, ") = ", micro_batches, "; ", fix);
  }
  plan.schedule = make_pipeline_schedule(kind, P, int(micro_batches), V);
  return plan;
}

}  // namespace tessera
