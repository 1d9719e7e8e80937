// The pipeline executor: one pass over a rank's action table.
#include "parallel/pp/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.h"

namespace tessera {

PipelineRunStats run_pipeline(const PipelineSchedule& schedule, Comm& pp, const PipelineStageWork& work) {
  TS_CHECK(pp.size() == schedule.stages, "run_pipeline: a schedule for ", schedule.stages, " stages on a pp group of ",
           pp.size());
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const auto start = Clock::now();
  PipelineRunStats stats;
  std::vector<Work> sends;
  int in_flight = 0;
  auto compute = [&](const std::function<void(int, int)>& step, const Action& a) {
    const auto t = Clock::now();
    step(a.chunk, a.micro);
    const double s = seconds_since(t);
    stats.compute_s += s;
    const size_t kind = size_t(a.kind);  // forward .. backward_weight are the first four kinds
    stats.kind_s[kind] += s;
    ++stats.kind_count[kind];
  };
  auto receive = [&](Tensor& buffer, const Action& a) {
    const auto t = Clock::now();
    pp.recv(buffer, a.peer);
    stats.wait_s += seconds_since(t);
  };
  auto release = [&](const Action& a) {
    work.release(a.chunk, a.micro);
    --in_flight;
  };
  // A chunk micro-batch is released after the last use of its activations: its backward, or the
  // send of its input's gradient that follows (zero-bubble: its weight-gradient part, later).
  const bool split = schedule.kind == ScheduleKind::zero_bubble;
  for (const Action& a : schedule.ranks[size_t(pp.rank())]) {
    switch (a.kind) {
      case ActionKind::forward:
        compute(work.forward, a);
        stats.peak_in_flight = std::max(stats.peak_in_flight, ++in_flight);
        break;
      case ActionKind::backward:
        compute(work.backward, a);
        if (a.chunk == 0) release(a);  // the first chunk sends no gradient
        break;
      case ActionKind::backward_input: compute(work.backward_input, a); break;
      case ActionKind::backward_weight:
        compute(work.backward_weight, a);
        release(a);
        break;
      case ActionKind::send_activation: sends.push_back(pp.send_async(work.activation_to_send(a.chunk, a.micro), a.peer)); break;
      case ActionKind::send_gradient:
        sends.push_back(pp.send_async(work.gradient_to_send(a.chunk, a.micro), a.peer));
        if (!split) release(a);
        break;
      case ActionKind::recv_activation: receive(work.activation_buffer(a.chunk, a.micro), a); break;
      case ActionKind::recv_gradient: receive(work.gradient_buffer(a.chunk, a.micro), a); break;
    }
    // Completed sends let go of their tensors (and with them, released activations).
    std::erase_if(sends, [](const Work& w) { return w.done(); });
  }
  const auto drain = Clock::now();
  for (Work& w : sends) w.wait();
  stats.wait_s += seconds_since(drain);
  stats.total_s = seconds_since(start);
  return stats;
}

}  // namespace tessera
