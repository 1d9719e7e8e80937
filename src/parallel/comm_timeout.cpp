// Timeout report: flight recorder dump, arrival probe, one-line error.
#include "parallel/comm_timeout.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace tessera {
namespace {

std::string join_ranks(const std::vector<std::string>& labels) {
  if (labels.empty()) return "none";
  std::string text = labels.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < labels.size(); ++i) text += (i ? ", " : "") + labels[i];
  return text;
}

}  // namespace

std::string comm_rank_label(const std::vector<int>& world_ranks, int rank) {
  std::string label = std::to_string(rank);
  if (world_ranks[size_t(rank)] != rank) label += " (world " + std::to_string(world_ranks[size_t(rank)]) + ")";
  return label;
}

void throw_comm_timeout(const CommGroupInfo& group, const TimedOutCall& call, FlightRecorder& recorder,
                        ArrivalChannel* arrivals) {
  const bool p2p = call.op == CommOp::send || call.op == CommOp::recv;
  const int size = int(group.world_ranks.size());
  auto label = [&](int r) { return comm_rank_label(group.world_ranks, r); };
  recorder.finish(call.record, p2p, FlightState::timed_out);
  std::fputs(recorder
                 .dump("tessera: flight recorder of comm '" + group.name + "' on rank " + label(group.rank) + " of " +
                       std::to_string(size))
                 .c_str(),
             stderr);

  std::ostringstream what;
  what << "comm '" << group.name << "' (rank " << label(group.rank) << " of " << size << "): " << comm_op_name(call.op)
       << (p2p ? "" : " #" + std::to_string(call.record)) << " (" << call.bytes << " bytes) did not complete within "
       << group.timeout_s << " s";
  if (p2p)
    TS_FAIL(what.str(), call.op == CommOp::send ? " to rank " : " from rank ", label(call.peer), "; that rank has not ",
            call.op == CommOp::send ? "received" : "sent", " it (skipped, stuck or dead)");

  std::vector<Arrival> found(size_t(size), Arrival{});
  if (arrivals)
    found = arrivals->probe(call.record, std::clamp(group.timeout_s / 2, 0.2, 2.0));
  else
    found[size_t(group.rank)] = Arrival{true, recorder.last_collective(), call.op};
  std::vector<std::string> arrived, missing, mismatched;
  bool behind = false;
  for (int r = 0; r < size; ++r) {
    const Arrival& a = found[size_t(r)];
    if (!a.known) {
      missing.push_back(label(r) + " (no answer: stuck or dead)");
    } else if (a.reached < call.record) {
      missing.push_back(label(r) + " (last issued #" + std::to_string(a.reached) + ")");
      behind = true;
    } else {
      arrived.push_back(label(r));
      if (a.op_at_seq && *a.op_at_seq != call.op)
        mismatched.push_back(label(r) + " issued " + std::string(comm_op_name(*a.op_at_seq)));
    }
  }
  std::string hint;
  if (!mismatched.empty()) hint += "; order differs: " + join_ranks(mismatched) + " as #" + std::to_string(call.record);
  if (behind || !mismatched.empty()) hint += "; every rank must issue this group's collectives in the same order";
  if (missing.empty()) hint += "; every rank issued it, so the transfer itself is stuck or slower than the timeout";
  TS_FAIL(what.str(), "; arrived: ", join_ranks(arrived), "; not arrived: ", join_ranks(missing), hint);
}

}  // namespace tessera
