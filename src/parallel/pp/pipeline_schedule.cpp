// The compute order of each schedule, then the sends and receives around it (see pipeline_schedule.h).
#include "parallel/pp/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "core/error.h"

namespace tessera {
namespace {

// A compute step of one rank: kind, chunk and micro-batch.
struct Step {
  ActionKind kind;
  int chunk, micro;
};

// 1F1B over a rank's forwards and backwards, given as sequences (k-th forward, k-th backward): `warmup`
// forwards, then forward/backward pairs, then the remaining backwards. Zero-bubble splits each
// backward and keeps up to `deferred` weight-gradient steps pending, the oldest first out.
std::vector<Step> one_f_one_b(const std::vector<Step>& forwards, const std::vector<Step>& backwards, size_t warmup,
                              bool split, size_t deferred) {
  std::vector<Step> out;
  std::deque<Step> pending;
  auto backward = [&](const Step& b) {
    if (!split) return out.push_back({ActionKind::backward, b.chunk, b.micro});
    out.push_back({ActionKind::backward_input, b.chunk, b.micro});
    pending.push_back({ActionKind::backward_weight, b.chunk, b.micro});
    while (pending.size() > deferred) {
      out.push_back(pending.front());
      pending.pop_front();
    }
  };
  size_t f = 0, b = 0;
  for (; f < std::min(warmup, forwards.size()); ++f) out.push_back(forwards[f]);
  while (f < forwards.size()) {
    out.push_back(forwards[f++]);
    backward(backwards[b++]);
  }
  while (b < backwards.size()) backward(backwards[b++]);
  out.insert(out.end(), pending.begin(), pending.end());
  return out;
}

// Rank r's compute steps.
std::vector<Step> compute_order(ScheduleKind kind, int P, int M, int V, int r) {
  std::vector<Step> forwards, backwards;
  if (kind == ScheduleKind::interleaved) {
    // Megatron's order: the k-th forward runs local chunk (k / P) mod V on micro-batch (k / (P V)) P + k mod P;
    // backwards walk the chunks from the last.
    for (int k = 0; k < M * V; ++k) {
      const int micro = k / (P * V) * P + k % P, v = k / P % V;
      forwards.push_back({ActionKind::forward, v * P + r, micro});
      backwards.push_back({ActionKind::backward, (V - 1 - v) * P + r, micro});
    }
  } else {
    for (int m = 0; m < M; ++m) {
      forwards.push_back({ActionKind::forward, r, m});
      backwards.push_back({ActionKind::backward, r, m});
    }
  }
  switch (kind) {
    case ScheduleKind::gpipe: {
      std::vector<Step> out = forwards;
      out.insert(out.end(), backwards.begin(), backwards.end());
      return out;
    }
    case ScheduleKind::one_f_one_b:
      return one_f_one_b(forwards, backwards, size_t(P - r - 1), false, 0);
    case ScheduleKind::interleaved:
      return one_f_one_b(forwards, backwards, size_t((P - r - 1) * 2 + (V - 1) * P), false, 0);
    case ScheduleKind::zero_bubble:
      return one_f_one_b(forwards, backwards, size_t(P - r - 1), true, size_t(r));
  }
  return {};
}

}  // namespace

std::string schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zero_bubble: return "zero-bubble";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                         ScheduleKind::zero_bubble})
    if (schedule_kind_name(k) == name) return k;
  TS_FAIL("--pipeline-schedule '", name, "' is not a schedule; choose gpipe, 1f1b, interleaved or zero-bubble");
}

PipelineSchedule make_pipeline_schedule(ScheduleKind kind, int P, int M, int V) {
  const std::string name = schedule_kind_name(kind);
  TS_CHECK(P >= 1, "--pp ", P, ": a pipeline needs at least 1 stage");
  TS_CHECK(M >= 1, "micro-batches ", M, ": a pipeline needs at least 1 micro-batch");
  TS_CHECK(V >= 1, "--virtual-stages ", V, " must be at least 1");
  TS_CHECK(int64_t(P) * V * M <= kMaxScheduleSlots, "--pp ", P, " x --virtual-stages ", V, " x ", M,
           " micro-batches is more than the ", kMaxScheduleSlots, " slots a step's schedule holds; use fewer ",
           "micro-batches (a larger micro-batch) or fewer stages");
  TS_CHECK(V == 1 || kind == ScheduleKind::interleaved, "--virtual-stages ", V, " needs the interleaved schedule, not ",
           name, "; use --pipeline-schedule interleaved or --virtual-stages 1");
  TS_CHECK(kind != ScheduleKind::interleaved || M % P == 0, "the interleaved schedule runs micro-batches in groups of --pp ",
           P, ", but there are ", M, "; use ", M < P ? "" : std::to_string(M / P * P) + " or ", (M / P + 1) * P,
           " micro-batches");
  PipelineSchedule s{kind, P, M, V, std::vector<std::vector<Action>>(size_t(P))};
  const int C = P * V;
  for (int r = 0; r < P; ++r) {
    std::vector<Action>& out = s.ranks[size_t(r)];
    for (const Step& step : compute_order(kind, P, M, V, r)) {
      const int c = step.chunk, m = step.micro;
      const bool forward = step.kind == ActionKind::forward;
      const bool sends_gradient = step.kind == ActionKind::backward || step.kind == ActionKind::backward_input;
      if (forward && c > 0) out.push_back({ActionKind::recv_activation, c, m, s.rank_of(c - 1)});
      if (sends_gradient && c < C - 1) out.push_back({ActionKind::recv_gradient, c, m, s.rank_of(c + 1)});
      out.push_back({step.kind, c, m, -1});
      if (forward && c < C - 1) out.push_back({ActionKind::send_activation, c, m, s.rank_of(c + 1)});
      if (sends_gradient && c > 0) out.push_back({ActionKind::send_gradient, c, m, s.rank_of(c - 1)});
    }
  }
  return s;
}

std::string action_text(const Action& a) {
  const std::string at = " c" + std::to_string(a.chunk) + " m" + std::to_string(a.micro);
  switch (a.kind) {
    case ActionKind::forward: return "F" + at;
    case ActionKind::backward: return "B" + at;
    case ActionKind::backward_input: return "Bi" + at;
    case ActionKind::backward_weight: return "W" + at;
    case ActionKind::send_activation: return "send-act" + at + " -> " + std::to_string(a.peer);
    case ActionKind::recv_activation: return "recv-act" + at + " <- " + std::to_string(a.peer);
    case ActionKind::send_gradient: return "send-grad" + at + " -> " + std::to_string(a.peer);
    case ActionKind::recv_gradient: return "recv-grad" + at + " <- " + std::to_string(a.peer);
  }
  return "?";
}

}  // namespace tessera
