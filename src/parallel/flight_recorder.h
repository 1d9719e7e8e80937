// The flight recorder of one group on one rank: its last N communications (sequence number, kind,
// bytes, start time, state), kept in a ring so a hang can be diagnosed after the fact. Collectives
// carry the group's sequence number (1, 2, ... in issue order, the same on every rank); point-to-
// point transfers are recorded with their peer. Thread-safe: issued from the caller, finished by the
// progress thread, read by the waiter that timed out and by the arrival channel.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm_args.h"

namespace tessera {

enum class FlightState { pending, done, failed, timed_out };

class FlightRecorder {
 public:
  explicit FlightRecorder(int capacity);

  // Records a collective (its sequence number is the next one) and returns that number.
  uint64_t start_collective(CommOp op, size_t bytes);
  // Records a send or receive; returns an id for finish().
  uint64_t start_p2p(CommOp op, int peer, size_t bytes);
  // Collectives are finished by their sequence number, transfers by their id.
  void finish(uint64_t id, bool p2p, FlightState state);

  // The sequence number of the last collective issued here (0: none yet).
  uint64_t last_collective() const;
  // The kind of collective number `seq`, while it is still in the ring.
  std::optional<CommOp> collective_at(uint64_t seq) const;
  // The ring, oldest first, one line per entry, under a title line.
  std::string dump(const std::string& title) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    uint64_t id = 0;  // sequence number (collective) or transfer id (p2p)
    bool p2p = false;
    CommOp op = CommOp::barrier;
    int peer = -1;
    size_t bytes = 0;
    Clock::time_point start, end;
    FlightState state = FlightState::pending;
  };
  Entry& push(Entry entry);
  Entry* find(uint64_t id, bool p2p);

  mutable std::mutex mutex_;
  std::vector<Entry> ring_;
  uint64_t recorded_ = 0;  // entries ever recorded; the next goes to ring_[recorded_ % size]
  uint64_t collectives_ = 0, transfers_ = 0;
};

}  // namespace tessera
