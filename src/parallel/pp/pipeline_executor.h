// Running one rank's part of a pipeline schedule (issue 8): its compute actions through the stage's
// callbacks, its sends non-blocking over the pp group (each Work keeps its tensor alive), its
// receives waiting where the table puts them. A chunk's micro-batch is released (its activations
// freed) as soon as its backward ran (zero-bubble: its weight-gradient part). The executor records
// the time it computed and the time it waited, and the chunk micro-batches holding activations at
// once, which the pipeline simulator predicts.
#pragma once

#include <array>
#include <functional>

#include "core/tensor.h"
#include "parallel/comm.h"
#include "parallel/pp/pipeline_schedule.h"

namespace tessera {

// What the executor calls; `chunk` is the model chunk of the action (0 .. P·V-1), always one of this
// rank's.
struct PipelineStageWork {
  std::function<void(int chunk, int micro)> forward, backward, backward_input, backward_weight, release;
  // What a send sends: the chunk's output after its forward, its input's gradient after its backward.
  std::function<const Tensor&(int chunk, int micro)> activation_to_send, gradient_to_send;
  // Where a receive lands: the chunk's input before its forward, its output's gradient before its backward.
  std::function<Tensor&(int chunk, int micro)> activation_buffer, gradient_buffer;
};

struct PipelineRunStats {
  double compute_s = 0;  // in the compute callbacks
  // By compute kind (forward, backward, backward_input, backward_weight): seconds and actions.
  std::array<double, 4> kind_s{};
  std::array<int, 4> kind_count{};
  double wait_s = 0;     // waiting for receives and, at the end, for the last sends
  double total_s = 0;
  int peak_in_flight = 0;  // chunk micro-batches whose forward ran and that were not yet released
  double idle_fraction() const { return total_s > 0 ? 1.0 - compute_s / total_s : 0.0; }
};

// Runs rank pp.rank()'s actions of `schedule` (pp.size() must be its P). Collective over pp.
PipelineRunStats run_pipeline(const PipelineSchedule& schedule, Comm& pp, const PipelineStageWork& work);

}  // namespace tessera
