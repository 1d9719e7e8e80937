// Which ranks of a group reached a given collective, asked without any collective, so that a rank
// whose wait timed out can name the ranks that are missing. Each rank answers queries on its own
// duplicate of the group's communicator from a thread that keeps running while its main thread
// computes or waits (the progress thread): the answer is the sequence number of the last collective
// it issued, and which collective it issued under the asked number. The asker waits for answers
// for a bounded time only; a rank that is dead or stopped stays unknown, never hangs it.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <vector>

#include "parallel/flight_recorder.h"

namespace tessera {

struct Arrival {
  bool known = false;               // the rank answered in time
  uint64_t reached = 0;             // the last collective it issued
  std::optional<CommOp> op_at_seq;  // what it issued under the asked sequence number
};

class ArrivalChannel {
 public:
  // Duplicates `comm` (a collective call over the group). `recorder` is this rank's, read to answer.
  ArrivalChannel(MPI_Comm comm, const FlightRecorder& recorder);
  // Frees the duplicate; serve() must no longer be running.
  ~ArrivalChannel();
  ArrivalChannel(const ArrivalChannel&) = delete;
  ArrivalChannel& operator=(const ArrivalChannel&) = delete;

  // Answers the queries that arrived; never blocks. Called from one thread only.
  void serve();
  // Asks every other rank about collective `seq` and collects answers for at most `bound_s`
  // seconds. One entry per rank; this rank's own entry is filled from its recorder.
  std::vector<Arrival> probe(uint64_t seq, double bound_s);

 private:
  using Query = std::array<int64_t, 2>;  // {query id, sequence number}
  using Reply = std::array<int64_t, 3>;  // {query id, last issued, kind issued under it or -1}

  Reply answer(const Query& query) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  const FlightRecorder& recorder_;
  int rank_ = 0, size_ = 1;
  // Serving side (the progress thread).
  Query incoming_{};
  MPI_Request incoming_request_ = MPI_REQUEST_NULL;
  std::list<std::pair<Reply, MPI_Request>> replies_;  // answers being sent; list: stable addresses
  // Asking side.
  std::mutex probe_mutex_;
  int64_t probes_ = 0;
  std::deque<Query> queries_;  // every query sent, alive as long as an abandoned send may read it
};

}  // namespace tessera
