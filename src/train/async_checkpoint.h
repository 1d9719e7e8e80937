// Asynchronous checkpoint writes (--async-checkpoint): the trainer snapshots its part of the state
// into host memory at a step boundary, hands the write to one background thread and trains on; the
// next save (and the end of the run) waits for the previous one. A failed background write is
// reported by that wait, as the error the write would have raised.
#pragma once

#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <thread>

namespace tessera {

class AsyncCheckpointWriter {
 public:
  AsyncCheckpointWriter() = default;
  ~AsyncCheckpointWriter();  // waits, and drops an error nobody asked for (the destructor cannot throw)
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Waits for the previous write, then starts `write` on the background thread.
  void start(std::function<void()> write);
  // Whether the write started last has ended (true when none was started); without waiting.
  bool landed() const { return landed_.load(std::memory_order_acquire); }
  // Once landed(): whether it ended with an error (which wait() rethrows).
  bool failed() const { return error_ != nullptr; }
  // Waits for the write in flight, if any; rethrows its error.
  void wait();

 private:
  std::thread thread_;
  std::exception_ptr error_;
  std::atomic<bool> landed_{true};
};

}  // namespace tessera
