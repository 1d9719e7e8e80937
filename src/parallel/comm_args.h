// What every Comm backend shares about its calls: the collective kinds and their names, the raw
// buffer of a tensor, and the argument checks. A check throws one line naming the group, the
// collective and the rule broken (sizes that do not split over the ranks, a dtype or device the
// backend cannot take, a peer or root outside the group), before anything is sent.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "parallel/comm.h"

namespace tessera {

enum class CommOp { all_reduce, reduce_scatter, all_gather, broadcast, all_to_all, all_to_allv, send, recv, barrier };

std::string_view comm_op_name(CommOp op);

// What a backend accepts: its device, and whether it reduces 16-bit floats (bf16 and f16).
struct CommBackend {
  std::string_view name;  // "MPI", "NCCL", "self"
  Device device;
  bool reduces_16bit_floats;
};

// The first byte of a tensor's elements, whatever its dtype.
void* tensor_data(const Tensor& t);

void check_all_reduce(const Comm& comm, const CommBackend& backend, const Tensor& t);
void check_reduce_scatter(const Comm& comm, const CommBackend& backend, const Tensor& in, const Tensor& out);
void check_all_gather(const Comm& comm, const CommBackend& backend, const Tensor& in, const Tensor& out);
void check_broadcast(const Comm& comm, const CommBackend& backend, const Tensor& t, int root);
void check_all_to_all(const Comm& comm, const CommBackend& backend, const Tensor& in, const Tensor& out);
void check_all_to_allv(const Comm& comm, const CommBackend& backend, const Tensor& in,
                       const std::vector<int64_t>& send_counts, const Tensor& out,
                       const std::vector<int64_t>& recv_counts);
// send or recv: a peer in the group other than this rank.
void check_peer(const Comm& comm, const CommBackend& backend, CommOp op, const Tensor& t, int peer);

// True when `in` is the chunk of `out` that this rank contributes to an all-gather (ZeRO gathers
// parameters in place this way): the backends then pass the in-place flag instead of a copy.
bool all_gather_in_place(const Comm& comm, const Tensor& in, const Tensor& out);

}  // namespace tessera
