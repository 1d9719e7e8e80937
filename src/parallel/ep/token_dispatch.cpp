// The token dispatcher's all-to-alls, their checks and their accounting.
#include "parallel/ep/token_dispatch.h"

#include <chrono>

#include "core/cuda/device.h"
#include "core/error.h"

namespace tessera {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

EpAllToAll::EpAllToAll(std::shared_ptr<Comm> ep, Device device) : ep_(std::move(ep)), device_(device) {}

std::vector<int64_t> EpAllToAll::exchange_counts(const std::vector<int64_t>& sent, int64_t local_experts,
                                                 int64_t max_rows_per_peer) {
  const int64_t peers = ep_->size(), n = peers * local_experts;
  TS_CHECK(int64_t(sent.size()) == n, "expert parallelism: ", sent.size(), " counts for ", peers, " ranks × ",
           local_experts, " experts");
  const auto start = std::chrono::steady_clock::now();
  Tensor out = Tensor::zeros({n}, DType::i32), in = Tensor::zeros({n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) out.data<int32_t>()[i] = int32_t(sent[size_t(i)]);
  if (device_ == Device::cpu) {
    ep_->all_to_all(out, in);
  } else {
    Tensor device_out = tensor_to(out, device_), device_in = Tensor::zeros({n}, DType::i32, device_);
    ep_->all_to_all(device_out, device_in);
    in = tensor_to(device_in, Device::cpu);
  }
  traffic_.seconds += seconds_since(start);
  traffic_.bytes_sent += double(out.bytes());
  std::vector<int64_t> received(static_cast<size_t>(n));
  for (int64_t p = 0; p < peers; ++p) {
    int64_t from_peer = 0;
    for (int64_t j = 0; j < local_experts; ++j) {
      const int64_t count = in.data<int32_t>()[p * local_experts + j];
      TS_CHECK(count >= 0, "expert parallelism: ep rank ", ep_->rank(), " received a token count of ", count,
               " from ep rank ", p, " for its expert ", j, "; a count cannot be negative — the ranks disagree about "
               "the model or the batch, so the job stops");
      from_peer += count;
      received[size_t(p * local_experts + j)] = count;
    }
    TS_CHECK(from_peer <= max_rows_per_peer, "expert parallelism: ep rank ", ep_->rank(), " received a token count of ",
             from_peer, " rows from ep rank ", p, ", more than the ", max_rows_per_peer,
             " a rank can route (tokens × top-k); the ranks disagree about the model or the batch, so the job stops "
             "instead of overrunning its buffer");
  }
  return received;
}

void EpAllToAll::exchange_rows(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                               const std::vector<int64_t>& recv_rows, const std::function<void()>& meanwhile) {
  TS_CHECK(send.ndim() == 2 && recv.ndim() == 2 && send.size(1) == recv.size(1),
           "expert parallelism: rows travel as (rows, channels) tensors of one width");
  const int64_t width = send.size(1);
  std::vector<int64_t> send_counts, recv_counts;
  int64_t sent = 0;
  for (int64_t rows : send_rows) send_counts.push_back(rows * width), sent += rows * width;
  for (int64_t rows : recv_rows) recv_counts.push_back(rows * width);
  const auto start = std::chrono::steady_clock::now();
  Work rows = ep_->all_to_allv_async(send, send_counts, recv, recv_counts);
  traffic_.seconds += seconds_since(start);
  if (meanwhile) meanwhile();
  const auto wait_start = std::chrono::steady_clock::now();
  rows.wait();
  traffic_.seconds += seconds_since(wait_start);
  traffic_.bytes_sent += double(sent) * double(dtype_size(send.dtype()));
}

EpTraffic EpAllToAll::take_traffic() {
  const EpTraffic traffic = traffic_;
  traffic_ = EpTraffic{};
  return traffic;
}

}  // namespace tessera
