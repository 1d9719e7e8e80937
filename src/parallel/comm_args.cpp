// Argument checks shared by the MPI, NCCL and self communicators.
#include "parallel/comm_args.h"

#include <climits>
#include <numeric>

namespace tessera {

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::broadcast: return "broadcast";
    case CommOp::all_to_all: return "all_to_all";
    case CommOp::all_to_allv: return "all_to_allv";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::barrier: return "barrier";
  }
  return "?";
}

void* tensor_data(const Tensor& t) {
  auto* mutable_t = const_cast<Tensor*>(&t);
  switch (t.dtype()) {
    case DType::f32: return mutable_t->data<float>();
    case DType::bf16: return mutable_t->data<bf16>();
    case DType::f16: return mutable_t->data<f16>();
    case DType::i32: return mutable_t->data<int32_t>();
    case DType::u16: return mutable_t->data<uint16_t>();
    case DType::u32: return mutable_t->data<uint32_t>();
  }
  return nullptr;
}

namespace {

// True when the two tensors' byte ranges overlap.
bool tensors_overlap(const Tensor& a, const Tensor& b) {
  if (a.bytes() == 0 || b.bytes() == 0) return false;
  auto* pa = static_cast<const char*>(tensor_data(a));
  auto* pb = static_cast<const char*>(tensor_data(b));
  return pa < pb + b.bytes() && pb < pa + a.bytes();
}

// "comm 'dp' all_gather: " — the start of every message.
std::string where(const Comm& comm, CommOp op) {
  return "comm '" + comm.name() + "' " + std::string(comm_op_name(op)) + ": ";
}

void check_tensor(const Comm& comm, const CommBackend& backend, CommOp op, const char* what, const Tensor& t) {
  TS_CHECK(t.defined(), where(comm, op), "the ", what, " tensor is undefined");
  TS_CHECK(t.device() == backend.device, where(comm, op), "the ", what, " tensor is on ",
           t.device() == Device::cpu ? "the CPU" : "a CUDA device", " but the ", backend.name, " backend takes ",
           backend.device == Device::cpu ? "CPU" : "CUDA", " tensors");
  // MPI counts are C ints; keep every backend to the same limit so layouts behave alike.
  TS_CHECK(t.numel() <= INT_MAX, where(comm, op), "the ", what, " tensor has ", t.numel(),
           " elements, more than one collective can carry (", INT_MAX, "); split it");
}

void check_same_dtype(const Comm& comm, CommOp op, const Tensor& in, const Tensor& out) {
  TS_CHECK(in.dtype() == out.dtype(), where(comm, op), "the output is ", dtype_name(out.dtype()), " but the input is ",
           dtype_name(in.dtype()), "; both must have the same dtype");
}

void check_reducible(const Comm& comm, const CommBackend& backend, CommOp op, DType dtype) {
  bool is_16bit_float = dtype == DType::bf16 || dtype == DType::f16;
  TS_CHECK(dtype != DType::u16 && (!is_16bit_float || backend.reduces_16bit_floats), where(comm, op), "the ",
           backend.name, " backend cannot reduce ", dtype_name(dtype), " tensors; reduce in f32");
}

void check_no_overlap(const Comm& comm, CommOp op, const Tensor& in, const Tensor& out) {
  TS_CHECK(!tensors_overlap(in, out), where(comm, op), "the input and output tensors overlap; use separate buffers");
}

void check_counts(const Comm& comm, CommOp op, const char* what, const std::vector<int64_t>& counts,
                  const char* tensor_what, const Tensor& t) {
  TS_CHECK(int(counts.size()) == comm.size(), where(comm, op), "got ", counts.size(), " ", what,
           " counts for a group of ", comm.size(), " ranks; give one count per rank");
  for (size_t p = 0; p < counts.size(); ++p)
    TS_CHECK(counts[p] >= 0, where(comm, op), what, " count for rank ", p, " is negative (", counts[p], ")");
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  TS_CHECK(total <= t.numel(), where(comm, op), what, " counts add up to ", total, " elements but the ", tensor_what,
           " tensor holds only ", t.numel());
}

}  // namespace

void check_all_reduce(const Comm& comm, const CommBackend& backend, const Tensor& t) {
  check_tensor(comm, backend, CommOp::all_reduce, "input", t);
  check_reducible(comm, backend, CommOp::all_reduce, t.dtype());
}

void check_reduce_scatter(const Comm& comm, const CommBackend& backend, const Tensor& in, const Tensor& out) {
  const CommOp kind = CommOp::reduce_scatter;
  check_tensor(comm, backend, kind, "input", in);
  check_tensor(comm, backend, kind, "output", out);
  check_same_dtype(comm, kind, in, out);
  check_reducible(comm, backend, kind, in.dtype());
  TS_CHECK(in.numel() == out.numel() * comm.size(), where(comm, kind), "the input has ", in.numel(),
           " elements but must hold one output-sized chunk (", out.numel(), ") per rank, ", out.numel() * comm.size(),
           " for ", comm.size(), " ranks; pad it to a multiple of ", comm.size());
  check_no_overlap(comm, kind, in, out);
}

void check_all_gather(const Comm& comm, const CommBackend& backend, const Tensor& in, const Tensor& out) {
  const CommOp kind = CommOp::all_gather;
  check_tensor(comm, backend, kind, "input", in);
  check_tensor(comm, backend, kind, "output", out);
  check_same_dtype(comm, kind, in, out);
  TS_CHECK(out.numel() == in.numel() * comm.size(), where(comm, kind), "the output has ", out.numel(),
           " elements but must hold one input-sized chunk (", in.numel(), ") per rank, ", in.numel() * comm.size(),
           " for ", comm.size(), " ranks");
  TS_CHECK(!tensors_overlap(in, out) || all_gather_in_place(comm, in, out), where(comm, kind),
           "the input overlaps the output other than as this rank's chunk ", comm.rank(),
           "; use separate buffers or a view of chunk ", comm.rank());
}

void check_broadcast(const Comm& comm, const CommBackend& backend, const Tensor& t, int root) {
  check_tensor(comm, backend, CommOp::broadcast, "input", t);
  TS_CHECK(root >= 0 && root < comm.size(), where(comm, CommOp::broadcast), "root ", root,
           " is not a rank of this group of ", comm.size());
}

void check_all_to_all(const Comm& comm, const CommBackend& backend, const Tensor& in, const Tensor& out) {
  const CommOp kind = CommOp::all_to_all;
  check_tensor(comm, backend, kind, "input", in);
  check_tensor(comm, backend, kind, "output", out);
  check_same_dtype(comm, kind, in, out);
  TS_CHECK(in.numel() == out.numel(), where(comm, kind), "the input has ", in.numel(), " elements and the output ",
           out.numel(), "; they must be the same size");
  TS_CHECK(in.numel() % comm.size() == 0, where(comm, kind), "the input has ", in.numel(),
           " elements, which do not split into ", comm.size(), " equal chunks (one per rank)");
  check_no_overlap(comm, kind, in, out);
}

void check_all_to_allv(const Comm& comm, const CommBackend& backend, const Tensor& in,
                       const std::vector<int64_t>& send_counts, const Tensor& out,
                       const std::vector<int64_t>& recv_counts) {
  const CommOp kind = CommOp::all_to_allv;
  check_tensor(comm, backend, kind, "input", in);
  check_tensor(comm, backend, kind, "output", out);
  check_same_dtype(comm, kind, in, out);
  check_counts(comm, kind, "send", send_counts, "input", in);
  check_counts(comm, kind, "receive", recv_counts, "output", out);
  check_no_overlap(comm, kind, in, out);
}

void check_peer(const Comm& comm, const CommBackend& backend, CommOp op, const Tensor& t, int peer) {
  check_tensor(comm, backend, op, op == CommOp::send ? "input" : "output", t);
  TS_CHECK(peer >= 0 && peer < comm.size(), where(comm, op), "peer ", peer, " is not a rank of this group of ",
           comm.size());
  TS_CHECK(peer != comm.rank(), where(comm, op), "peer ", peer, " is this rank itself; copy the tensor instead");
}

bool all_gather_in_place(const Comm& comm, const Tensor& in, const Tensor& out) {
  if (in.bytes() == 0) return false;
  return tensor_data(in) == static_cast<char*>(tensor_data(out)) + size_t(comm.rank()) * in.bytes();
}

}  // namespace tessera
