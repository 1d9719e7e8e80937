// Pipeline schedules as data (issue 8): for P pipeline ranks, M micro-batches and V virtual stages
// per rank, each rank's ordered list of actions. The model is cut into P·V chunks; chunk c lives on
// rank c mod P (Megatron's interleaved placement; V = 1 is one chunk per rank). A chunk's forward of
// micro-batch m needs chunk c-1's output for m, its backward chunk c+1's input gradient for m; the
// sends and receives that carry them are actions too, placed right after the compute that produces
// them and right before the compute that needs them. Sends never block; a receive waits for its send.
//   gpipe        every forward, then every backward
//   1f1b         P-r-1 warm-up forwards on rank r, then one forward / one backward, then the rest
//   interleaved  1F1B over the V chunks of a rank, micro-batches in groups of P (M a multiple of P)
//   zero-bubble  ZB-H1 (Qi et al., 2023): 1F1B with each backward split into its input-gradient part
//                (on the critical path) and its weight-gradient part, which rank r defers by up to r
//                micro-batches so it fills what would be idle time; V = 1
#pragma once

#include <string>
#include <vector>

namespace tessera {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zero_bubble };

// "gpipe", "1f1b", "interleaved", "zero-bubble"; parse_schedule_kind throws naming the choices.
std::string schedule_kind_name(ScheduleKind kind);
ScheduleKind parse_schedule_kind(const std::string& name);

enum class ActionKind {
  forward,
  backward,         // input and weight gradients together
  backward_input,   // zero-bubble: the input gradient (what the previous chunk waits for)
  backward_weight,  // zero-bubble: the weight gradient, deferred
  send_activation,  // to the rank of chunk + 1
  recv_activation,  // from the rank of chunk - 1
  send_gradient,    // to the rank of chunk - 1
  recv_gradient,    // from the rank of chunk + 1
};

struct Action {
  ActionKind kind;
  int chunk;  // model chunk, 0 .. P·V-1 (a compute action's own chunk; a send's or receive's local chunk)
  int micro;  // micro-batch
  int peer;   // the other rank of a send or receive; -1 for compute
  bool operator==(const Action&) const = default;
};

struct PipelineSchedule {
  ScheduleKind kind;
  int stages, micro_batches, virtual_stages;  // P, M, V
  std::vector<std::vector<Action>> ranks;     // each rank's actions in order
  int chunks() const { return stages * virtual_stages; }
  int rank_of(int chunk) const { return chunk % stages; }
};

// The most forward slots (stages P x virtual stages V x micro-batches M) one step's schedule holds;
// runs use a few thousand to a few hundred thousand (pp 16, V 4, M 2048: 131072).
inline constexpr int64_t kMaxScheduleSlots = int64_t(1) << 24;

// Throws tessera::Error (naming the numbers and the nearest valid choice) for P < 1, M < 1, V < 1,
// P V M above kMaxScheduleSlots, V > 1 with a schedule other than interleaved, and M not a multiple
// of P for interleaved.
PipelineSchedule make_pipeline_schedule(ScheduleKind kind, int stages, int micro_batches, int virtual_stages = 1);

// One line per action, for messages and tests: "F c2 m3", "send-act c2 m3 -> 1".
std::string action_text(const Action& a);

}  // namespace tessera
