// The progress thread of one MPI communicator. Open MPI here has no asynchronous progress: a
// non-blocking collective only advances while some thread is inside MPI. This thread tests the
// group's pending requests in a loop, marks them complete in the flight recorder and wakes the
// waiters. While a thread waits on a request it polls without pausing (nothing computes then);
// otherwise, after a few passes that complete nothing, it pauses between passes for 20 µs doubling
// up to 1 ms, so a reduction overlapped with compute costs it a few percent of a core.
// When nothing is pending it sleeps on a condition variable, waking every few milliseconds to run
// `serve` (the arrival channel's answers).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "parallel/flight_recorder.h"

namespace tessera {

// One MPI request in flight, with what must live until it completes.
struct MpiRequest {
  MPI_Request handle = MPI_REQUEST_NULL;
  std::vector<Tensor> buffers;  // the tensors MPI reads or writes
  std::vector<int> counts;      // all_to_allv counts and displacements, read by MPI until completion
  uint64_t record = 0;          // flight recorder id (collective sequence number or transfer id)
  bool p2p = false;
  std::atomic<bool> done{false};
  int error = MPI_SUCCESS;  // written before `done`
};

class MpiProgress {
 public:
  MpiProgress(FlightRecorder& recorder, std::function<void()> serve);
  ~MpiProgress();
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  // Hands a started request to the thread.
  void submit(std::shared_ptr<MpiRequest> request);
  // Blocks until `request` completed (true) or the deadline passed (false).
  bool wait_until(const MpiRequest& request, std::chrono::steady_clock::time_point deadline);
  // Stops the thread (idempotent). Returns how many requests never completed: they are abandoned,
  // and their communicator must not be freed.
  size_t stop();

 private:
  void run();
  // One MPI_Testsome over the active requests; true when any completed.
  bool test_active();

  FlightRecorder& recorder_;
  std::function<void()> serve_;
  std::mutex mutex_;
  std::condition_variable wake_;       // a new request, or stop
  std::condition_variable completed_;  // some request completed
  std::vector<std::shared_ptr<MpiRequest>> incoming_;
  bool stopping_ = false;
  std::atomic<int> waiters_{0};  // threads blocked in wait_until
  // Owned by the thread while it runs.
  std::vector<std::shared_ptr<MpiRequest>> active_;
  std::vector<MPI_Request> handles_;
  std::thread thread_;
};

}  // namespace tessera
