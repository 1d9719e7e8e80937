// Communicators: one Comm per process group, over MPI (CPU tensors) or NCCL (GPU tensors). Every
// collective exists blocking and non-blocking (a Work handle to wait on); the tensors of a pending
// collective must stay alive and untouched until its Work completes. A group of one rank takes the
// same calls and does no communication. Waits time out (CommOptions::timeout_s): the error names
// the group, the collective and its sequence number, and which ranks had and had not arrived, and
// the group's flight recorder (its last collectives) is dumped first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tessera {

enum class ReduceOp { sum, max, min };

// A pending collective. wait() returns when it completed, or throws on timeout or failure.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void wait();
  bool done() const;

 private:
  std::shared_ptr<State> state_;
};

// How device (CUDA) tensors travel between the ranks of a group: copied through host memory and
// sent over MPI (several ranks may share a GPU: the tests' way), or over NCCL (one GPU per rank: the
// production way). Host tensors go over MPI either way.
enum class DeviceTransport { host_staged, nccl };

struct CommOptions {
  double timeout_s = 300.0;
  int flight_recorder_entries = 64;
  DeviceTransport device_transport = DeviceTransport::host_staged;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name in messages: "dp", "tp", "world", ...
  virtual const std::string& name() const = 0;
  // The world ranks of this group's members, in group-rank order.
  virtual const std::vector<int>& world_ranks() const = 0;

  // In place over all ranks.
  virtual Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // in holds size() equal chunks; rank r receives the reduction of chunk r in `out`.
  virtual Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::sum) = 0;
  // out (size() · in.numel()) receives every rank's `in`, in rank order.
  virtual Work all_gather_async(const Tensor& in, Tensor& out) = 0;
  virtual Work broadcast_async(Tensor& t, int root) = 0;
  // in and out hold size() equal chunks; chunk r of `in` goes to rank r.
  virtual Work all_to_all_async(const Tensor& in, Tensor& out) = 0;
  // Element counts per peer; chunks are contiguous in peer order.
  virtual Work all_to_allv_async(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                                 const std::vector<int64_t>& recv_counts) = 0;
  virtual Work send_async(const Tensor& t, int peer) = 0;
  virtual Work recv_async(Tensor& t, int peer) = 0;
  virtual Work barrier_async() = 0;

  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(t, op).wait(); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(in, out, op).wait();
  }
  void all_gather(const Tensor& in, Tensor& out) { all_gather_async(in, out).wait(); }
  void broadcast(Tensor& t, int root) { broadcast_async(t, root).wait(); }
  void all_to_all(const Tensor& in, Tensor& out) { all_to_all_async(in, out).wait(); }
  void send(const Tensor& t, int peer) { send_async(t, peer).wait(); }
  void recv(Tensor& t, int peer) { recv_async(t, peer).wait(); }
  void barrier() { barrier_async().wait(); }
};

}  // namespace tessera
