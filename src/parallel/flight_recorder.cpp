// Flight recorder ring and its dump.
#include "parallel/flight_recorder.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace tessera {

FlightRecorder::FlightRecorder(int capacity) {
  TS_CHECK(capacity > 0, "the flight recorder needs at least one entry (got ", capacity, ")");
  ring_.resize(size_t(capacity));
}

FlightRecorder::Entry& FlightRecorder::push(Entry entry) {
  Entry& slot = ring_[recorded_++ % ring_.size()];
  slot = entry;
  return slot;
}

FlightRecorder::Entry* FlightRecorder::find(uint64_t id, bool p2p) {
  size_t held = std::min<uint64_t>(recorded_, ring_.size());
  for (size_t back = 1; back <= held; ++back) {
    Entry& e = ring_[(recorded_ - back) % ring_.size()];
    if (e.id == id && e.p2p == p2p) return &e;
  }
  return nullptr;
}

uint64_t FlightRecorder::start_collective(CommOp op, size_t bytes) {
  std::lock_guard lock(mutex_);
  return push(Entry{++collectives_, false, op, -1, bytes, Clock::now(), {}, FlightState::pending}).id;
}

uint64_t FlightRecorder::start_p2p(CommOp op, int peer, size_t bytes) {
  std::lock_guard lock(mutex_);
  return push(Entry{++transfers_, true, op, peer, bytes, Clock::now(), {}, FlightState::pending}).id;
}

void FlightRecorder::finish(uint64_t id, bool p2p, FlightState state) {
  std::lock_guard lock(mutex_);
  if (Entry* e = find(id, p2p)) {
    e->state = state;
    e->end = Clock::now();
  }
}

uint64_t FlightRecorder::last_collective() const {
  std::lock_guard lock(mutex_);
  return collectives_;
}

std::optional<CommOp> FlightRecorder::collective_at(uint64_t seq) const {
  std::lock_guard lock(mutex_);
  if (Entry* e = const_cast<FlightRecorder*>(this)->find(seq, false)) return e->op;
  return std::nullopt;
}

std::string FlightRecorder::dump(const std::string& title) const {
  std::lock_guard lock(mutex_);
  const Clock::time_point now = Clock::now();
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  size_t held = std::min<uint64_t>(recorded_, ring_.size());
  std::string text =
      title + ": last " + std::to_string(held) + " of " + std::to_string(recorded_) + " communications, oldest first\n";
  for (size_t back = held; back >= 1; --back) {
    const Entry& e = ring_[(recorded_ - back) % ring_.size()];
    std::string kind = std::string(comm_op_name(e.op));
    if (e.p2p) kind += (e.op == CommOp::send ? " to " : " from ") + std::to_string(e.peer);
    char state[64];
    switch (e.state) {
      case FlightState::pending: std::snprintf(state, sizeof state, "pending"); break;
      case FlightState::timed_out: std::snprintf(state, sizeof state, "TIMED OUT"); break;
      case FlightState::failed:
        std::snprintf(state, sizeof state, "failed after %.3f ms", 1e3 * seconds(e.end - e.start));
        break;
      case FlightState::done:
        std::snprintf(state, sizeof state, "done in %.3f ms", 1e3 * seconds(e.end - e.start));
        break;
    }
    char line[256];
    std::snprintf(line, sizeof line, "  %s%-6llu %-20s %12zu bytes  started %9.3f s ago  %s\n", e.p2p ? "p2p " : "#",
                  static_cast<unsigned long long>(e.id), kind.c_str(), e.bytes, seconds(now - e.start), state);
    text += line;
  }
  return text;
}

}  // namespace tessera
