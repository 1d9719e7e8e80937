// Progress thread: polls the pending requests of one communicator with MPI_Testsome.
#include "parallel/mpi_progress.h"

#include <sys/prctl.h>

#include <algorithm>

namespace tessera {
namespace {

using std::chrono::microseconds;

// Passes that complete nothing before the thread starts pausing (yielding in between).
constexpr int kSpinPasses = 16;
// Pause between passes while requests are pending and nobody waits: from the microseconds a round
// of a collective takes over shared memory, doubling up to a bound that keeps a long overlapped
// reduction from costing compute more than a few percent of a core.
constexpr microseconds kMinPause(20);
constexpr microseconds kMaxPause(1000);
// Wake-up period with nothing pending, to answer arrival queries.
constexpr microseconds kIdlePause(5000);

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
  ++waiters_;
  wake_.notify_one();  // end a pause: poll without pausing while this thread waits
  bool done = completed_.wait_until(lock, deadline, [&] { return request.done.load(); });
  --waiters_;
  return done;
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
  prctl(PR_SET_TIMERSLACK, 1UL);  // let the short pauses below be short
  int quiet_passes = 0;
  microseconds pause(0);
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      const microseconds timeout = active_.empty() && incoming_.empty() ? kIdlePause : pause;
      if (timeout.count() > 0)
        wake_.wait_for(lock, timeout, [&] { return stopping_ || !incoming_.empty() || waiters_ > 0; });
      if (stopping_) return;
      if (!incoming_.empty()) {  // a new request: poll it closely again
        quiet_passes = 0;
        pause = microseconds(0);
      }
      for (auto& request : incoming_) {
        handles_.push_back(request->handle);
        active_.push_back(std::move(request));
      }
      incoming_.clear();
    }
    serve_();
    if (active_.empty()) continue;
    // While a thread waits nothing computes on its behalf: poll without pausing, as a blocking MPI
    // call would. Otherwise pause longer and longer while passes complete nothing.
    if (test_active() || waiters_ > 0) {
      quiet_passes = 0;
      pause = microseconds(0);
    } else if (++quiet_passes >= kSpinPasses) {
      pause = std::clamp(pause * 2, kMinPause, kMaxPause);
    }
    if (pause.count() == 0) std::this_thread::yield();
  }
}

}  // namespace tessera
