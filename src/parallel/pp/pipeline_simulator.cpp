// Event-free simulation of a pipeline schedule (see pipeline_simulator.h): ranks advance in turn as far
// as their next receive allows until all are done or none can move.
#include "parallel/pp/pipeline_simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <tuple>

#include "core/error.h"

namespace tessera {
namespace {

// A message on the wire: activation (true) or gradient, the chunk that sent it, the micro-batch.
using Message = std::tuple<bool, int, int>;

double cost_of(ActionKind k, const StepCosts& c, int V) {
  switch (k) {
    case ActionKind::forward: return c.forward / V;
    case ActionKind::backward: return c.backward / V;
    case ActionKind::backward_input: return c.backward_input / V;
    case ActionKind::backward_weight: return c.backward_weight / V;
    default: return 0.0;
  }
}

}  // namespace

double PipelineTimeline::bubble_fraction() const {
  if (makespan <= 0 || busy.empty()) return 0.0;
  double total_busy = 0;
  for (double b : busy) total_busy += b;
  return 1.0 - total_busy / (makespan * double(busy.size()));
}

PipelineTimeline simulate_pipeline(const PipelineSchedule& s, const StepCosts& costs) {
  return simulate_pipeline(s, std::vector<StepCosts>(s.ranks.size(), costs));
}

PipelineTimeline simulate_pipeline(const PipelineSchedule& s, const std::vector<StepCosts>& costs) {
  const size_t P = s.ranks.size();
  TS_CHECK(costs.size() == P, "simulate_pipeline: ", costs.size(), " ranks' costs for ", P, " ranks");
  PipelineTimeline t;
  t.ranks.resize(P);
  t.busy.assign(P, 0.0);
  t.peak_in_flight.assign(P, 0);
  std::vector<double> clock(P, 0.0);
  std::vector<size_t> next(P, 0);
  std::vector<int> in_flight(P, 0);
  std::map<Message, double> sent;  // messages sent and not yet received, with their send time
  // Each link (sender, receiver) delivers in the order of its sends, as MPI and NCCL do: a receive
  // takes the oldest message on its link, which must be the one it expects.
  std::map<std::pair<int, int>, std::deque<Message>> links;
  size_t remaining = 0;
  for (const auto& actions : s.ranks) remaining += actions.size();
  while (remaining > 0) {
    bool moved = false;
    for (size_t r = 0; r < P; ++r) {
      for (; next[r] < s.ranks[r].size(); ++next[r], --remaining, moved = true) {
        const Action& a = s.ranks[r][next[r]];
        if (a.kind == ActionKind::send_activation || a.kind == ActionKind::send_gradient) {
          const Message m{a.kind == ActionKind::send_activation, a.chunk, a.micro};
          sent[m] = clock[r];
          links[{int(r), a.peer}].push_back(m);
        } else if (a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_gradient) {
          const bool activation = a.kind == ActionKind::recv_activation;
          const Message want{activation, activation ? a.chunk - 1 : a.chunk + 1, a.micro};
          std::deque<Message>& link = links[{a.peer, int(r)}];
          if (link.empty()) break;  // waits for its send
          if (link.front() != want) {
            const auto& [front_activation, front_chunk, front_micro] = link.front();
            TS_FAIL(schedule_kind_name(s.kind), " schedule: rank ", r, " at ", action_text(a), " would receive rank ",
                    a.peer, "'s earlier ", front_activation ? "activation" : "gradient", " of chunk ", front_chunk,
                    " micro-batch ", front_micro, ": the link's messages arrive in the order they were sent");
          }
          link.pop_front();
          const auto it = sent.find(want);
          clock[r] = std::max(clock[r], it->second);
          sent.erase(it);
        } else {
          const double start = clock[r];
          clock[r] += cost_of(a.kind, costs[r], s.virtual_stages);
          t.busy[r] += clock[r] - start;
          t.ranks[r].push_back({a, start, clock[r]});
          const bool frees = a.kind == ActionKind::backward || a.kind == ActionKind::backward_weight;
          in_flight[r] += a.kind == ActionKind::forward ? 1 : frees ? -1 : 0;
          t.peak_in_flight[r] = std::max(t.peak_in_flight[r], in_flight[r]);
        }
      }
    }
    if (!moved) {
      std::string stuck;
      for (size_t r = 0; r < P; ++r)
        if (next[r] < s.ranks[r].size())
          stuck += (stuck.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " at " + action_text(s.ranks[r][next[r]]));
      TS_FAIL(schedule_kind_name(s.kind), " schedule deadlocks: ", stuck);
    }
  }
  if (!sent.empty()) {
    const auto& [activation, chunk, micro] = sent.begin()->first;
    TS_FAIL(schedule_kind_name(s.kind), " schedule: the ", activation ? "activation" : "gradient", " chunk ", chunk,
            " sends for micro-batch ", micro, " is never received (", sent.size(), " such sends)");
  }
  t.makespan = *std::max_element(clock.begin(), clock.end());
  return t;
}

double analytic_bubble_fraction(ScheduleKind kind, int P, int M, int V, const StepCosts& c) {
  switch (kind) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b: return double(P - 1) / double(M + P - 1);
    case ScheduleKind::interleaved: return double(P - 1) / double(V * M + P - 1);
    case ScheduleKind::zero_bubble: {
      const double idle = (P - 1) * (c.forward + c.backward_input - c.backward_weight);
      return idle / (idle + M * (c.forward + c.backward_input + c.backward_weight));
    }
  }
  return 0.0;
}

}  // namespace tessera
