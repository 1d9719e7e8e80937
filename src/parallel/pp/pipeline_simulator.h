// Running a pipeline schedule on paper: every rank works through its actions in order, a send never
// blocks, a receive waits for its send, compute takes the given time and communication none. What
// comes out is each rank's timeline, the bubble (idle share) and the micro-batches in flight, which
// `tessera plan pipeline` prints and the executor's measurements are held to; and the check that a
// schedule is sound: no rank waits forever, and every send has its receive.
#pragma once

#include <vector>

#include "parallel/pp/pipeline_schedule.h"

namespace tessera {

// Compute times of one whole stage (V = 1); a chunk of an interleaved stage takes 1/V of them.
struct StepCosts {
  double forward = 1.0, backward = 2.0;             // backward: input and weight gradients
  double backward_input = 1.0, backward_weight = 1.0;  // zero-bubble's split of it
};

struct TimedAction {
  Action action;  // a compute action
  double start, end;
};

struct PipelineTimeline {
  std::vector<std::vector<TimedAction>> ranks;  // each rank's compute, in order
  double makespan = 0;
  std::vector<double> busy;         // per rank: time spent computing
  std::vector<int> peak_in_flight;  // per rank: most chunk-micro-batches holding activations at once
                                    // (forward ran, the backward that frees them has not)
  // Idle time over all ranks as a share of P × makespan.
  double bubble_fraction() const;
};

// Throws tessera::Error naming the stuck ranks and the actions they wait at when no rank can move
// (a deadlock), naming any send that no receive took, and naming a receive that would take another
// message than its own (a link delivers in the order of its sends, as MPI and NCCL do).
PipelineTimeline simulate_pipeline(const PipelineSchedule& schedule, const StepCosts& costs = {});
// The same with each rank's own compute times (per_rank.size() == P): stages of unequal cost, as
// measured (the last one carries the head).
PipelineTimeline simulate_pipeline(const PipelineSchedule& schedule, const std::vector<StepCosts>& per_rank);

// The textbook bubble for uniform stages and free communication: (P-1)/(M+P-1) for gpipe and 1f1b,
// (P-1)/(V M+P-1) for interleaved, and for zero-bubble (ZB-H1) (P-1)(F+Bi-W) idle against M(F+Bi+W)
// of work per rank.
double analytic_bubble_fraction(ScheduleKind kind, int stages, int micro_batches, int virtual_stages,
                                const StepCosts& costs = {});

}  // namespace tessera
