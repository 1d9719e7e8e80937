// Arrival queries and answers over a duplicate communicator, point to point and non-blocking.
#include "parallel/arrival_channel.h"

#include <chrono>
#include <thread>

#include "parallel/mpi_check.h"

namespace tessera {
namespace {

constexpr int kQueryTag = 1;
constexpr int kReplyTag = 2;

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

}  // namespace

ArrivalChannel::ArrivalChannel(MPI_Comm comm, const FlightRecorder& recorder) : recorder_(recorder) {
  MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

ArrivalChannel::~ArrivalChannel() {
  if (mpi_finalized()) return;
  if (incoming_request_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&incoming_request_);
    MPI_Wait(&incoming_request_, MPI_STATUS_IGNORE);
  }
  for (auto& [reply, request] : replies_)
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);  // the send finishes on its own
  MPI_Comm_free(&comm_);
}

ArrivalChannel::Reply ArrivalChannel::answer(const Query& query) const {
  std::optional<CommOp> op = recorder_.collective_at(uint64_t(query[1]));
  return Reply{query[0], int64_t(recorder_.last_collective()), op ? int64_t(*op) : -1};
}

void ArrivalChannel::serve() {
  if (incoming_request_ == MPI_REQUEST_NULL &&
      MPI_Irecv(incoming_.data(), 2, MPI_INT64_T, MPI_ANY_SOURCE, kQueryTag, comm_, &incoming_request_) != MPI_SUCCESS)
    return;
  int arrived = 0;
  MPI_Status status;
  if (MPI_Test(&incoming_request_, &arrived, &status) == MPI_SUCCESS && arrived) {
    auto& [reply, request] = replies_.emplace_back(answer(incoming_), MPI_REQUEST_NULL);
    MPI_Isend(reply.data(), 3, MPI_INT64_T, status.MPI_SOURCE, kReplyTag, comm_, &request);
  }
  for (auto it = replies_.begin(); it != replies_.end();) {
    int sent = 0;
    if (it->second == MPI_REQUEST_NULL || (MPI_Test(&it->second, &sent, MPI_STATUS_IGNORE) == MPI_SUCCESS && sent))
      it = replies_.erase(it);
    else
      ++it;
  }
}

std::vector<Arrival> ArrivalChannel::probe(uint64_t seq, double bound_s) {
  std::lock_guard lock(probe_mutex_);
  const Query& query = queries_.emplace_back(Query{++probes_, int64_t(seq)});
  std::vector<Arrival> arrivals(static_cast<size_t>(size_));
  Reply own = answer(query);
  arrivals[size_t(rank_)] = Arrival{true, uint64_t(own[1]), recorder_.collective_at(seq)};

  std::vector<Reply> replies(static_cast<size_t>(size_));
  std::vector<MPI_Request> receives(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends(receives);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Irecv(replies[size_t(r)].data(), 3, MPI_INT64_T, r, kReplyTag, comm_, &receives[size_t(r)]);
    MPI_Isend(query.data(), 2, MPI_INT64_T, r, kQueryTag, comm_, &sends[size_t(r)]);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(bound_s);
  std::vector<int> indices(receives.size());
  for (int waiting = size_ - 1; waiting > 0 && std::chrono::steady_clock::now() < deadline;) {
    int completed = 0;  // MPI_Testall would complete none until all answered
    if (MPI_Testsome(size_, receives.data(), &completed, indices.data(), MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
        completed == MPI_UNDEFINED)
      break;
    waiting -= completed;
    if (waiting > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request& receive = receives[size_t(r)];
    if (receive == MPI_REQUEST_NULL) {
      const Reply& reply = replies[size_t(r)];
      if (reply[0] == query[0])
        arrivals[size_t(r)] =
            Arrival{true, uint64_t(reply[1]), reply[2] >= 0 ? std::optional<CommOp>(CommOp(reply[2])) : std::nullopt};
    } else {
      MPI_Cancel(&receive);
      MPI_Wait(&receive, MPI_STATUS_IGNORE);
    }
    int sent = 0;
    MPI_Request& send = sends[size_t(r)];
    if (send != MPI_REQUEST_NULL && (MPI_Test(&send, &sent, MPI_STATUS_IGNORE) != MPI_SUCCESS || !sent))
      MPI_Request_free(&send);
  }
  return arrivals;
}

}  // namespace tessera
