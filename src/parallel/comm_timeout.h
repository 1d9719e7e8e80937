// The report of a wait that timed out, shared by the MPI and NCCL backends: the group's flight
// recorder goes to stderr, the other ranks are asked how far they got (for a collective), and the
// error is one line naming the group, the collective, its sequence number, and the ranks that had
// and had not arrived ("no answer" for a rank that is stuck or dead).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/arrival_channel.h"
#include "parallel/flight_recorder.h"

namespace tessera {

// Who is reporting: the group and this rank in it.
struct CommGroupInfo {
  const std::string& name;
  const std::vector<int>& world_ranks;
  int rank;
  double timeout_s;
};

// What timed out: a collective (record = its sequence number) or a transfer with `peer`.
struct TimedOutCall {
  CommOp op;
  uint64_t record;
  int peer;
  size_t bytes;
};

// "2", or "2 (world 6)" when the group rank differs from the world rank.
std::string comm_rank_label(const std::vector<int>& world_ranks, int rank);

// Marks the call timed out, dumps the recorder, asks `arrivals` (null: nobody to ask), and throws.
[[noreturn]] void throw_comm_timeout(const CommGroupInfo& group, const TimedOutCall& call, FlightRecorder& recorder,
                                     ArrivalChannel* arrivals);

}  // namespace tessera
