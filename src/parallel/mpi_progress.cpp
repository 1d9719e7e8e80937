// Progress thread: polls the pending requests of one communicator with MPI_Testsome.
#include "parallel/mpi_progress.h"

#include <sys/prctl.h>

namespace tessera {
namespace {

// After a pass that completed nothing, the thread yields this many times before it starts sleeping.
constexpr int kSpinPasses = 16;
// Sleep between passes while requests are pending: short against the microseconds a round of a
// collective takes over shared memory, long enough to leave the core to compute.
constexpr auto kBusySleep = std::chrono::microseconds(20);
// Wake-up period with nothing pending, to answer arrival queries.
constexpr auto kIdleSleep = std::chrono::milliseconds(2);

}  // namespace

MpiProgress::MpiProgress(FlightRecorder& recorder, std::function<void()> serve)
    : recorder_(recorder), serve_(std::move(serve)), thread_([this] { run(); }) {}

MpiProgress::~MpiProgress() { stop(); }

void MpiProgress::submit(std::shared_ptr<MpiRequest> request) {
  {
    std::lock_guard lock(mutex_);
    incoming_.push_back(std::move(request));
  }
  wake_.notify_one();
}

bool MpiProgress::wait_until(const MpiRequest& request, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return completed_.wait_until(lock, deadline, [&] { return request.done.load(); });
}

size_t MpiProgress::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  return active_.size() + incoming_.size();
}

bool MpiProgress::test_active() {
  const int n = int(handles_.size());
  std::vector<int> indices(handles_.size(), 0);
  std::vector<MPI_Status> statuses(handles_.size());
  int completed = 0;
  int code = MPI_Testsome(n, handles_.data(), &completed, indices.data(), statuses.data());
  if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
    // The call itself failed: no request can be trusted to finish.
    completed = n;
    for (int i = 0; i < n; ++i) {
      indices[size_t(i)] = i;
      statuses[size_t(i)].MPI_ERROR = code;
    }
  }
  if (completed == MPI_UNDEFINED || completed == 0) return false;
  std::vector<bool> finished(handles_.size(), false);
  {
    std::lock_guard lock(mutex_);
    for (int k = 0; k < completed; ++k) {
      const size_t i = size_t(indices[size_t(k)]);
      MpiRequest& request = *active_[i];
      request.error = code == MPI_SUCCESS ? MPI_SUCCESS : statuses[size_t(k)].MPI_ERROR;
      recorder_.finish(request.record, request.p2p,
                       request.error == MPI_SUCCESS ? FlightState::done : FlightState::failed);
      request.buffers.clear();  // MPI is done with them: free them now, not when the handle dies
      request.done = true;
      finished[i] = true;
    }
  }
  completed_.notify_all();
  size_t kept = 0;
  for (size_t i = 0; i < size_t(n); ++i) {
    if (finished[i]) continue;
    active_[kept] = std::move(active_[i]);
    handles_[kept] = handles_[i];
    ++kept;
  }
  active_.resize(kept);
  handles_.resize(kept);
  return true;
}

void MpiProgress::run() {
  prctl(PR_SET_TIMERSLACK, 1UL);  // let the short sleeps below be short
  int quiet_passes = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (active_.empty() && incoming_.empty() && !stopping_) wake_.wait_for(lock, kIdleSleep);
      if (stopping_) return;
      for (auto& request : incoming_) {
        handles_.push_back(request->handle);
        active_.push_back(std::move(request));
        quiet_passes = 0;
      }
      incoming_.clear();
    }
    serve_();
    if (active_.empty()) continue;
    if (test_active()) {
      quiet_passes = 0;
    } else if (++quiet_passes < kSpinPasses) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kBusySleep);
    }
  }
}

}  // namespace tessera
