// The communicator of a group of one rank: every collective is complete when issued, and the ones
// with a separate output copy the input there. It never calls MPI, so a process started without a
// launcher runs the same code as rank 0 of a job. Tensors may live on the CPU or the GPU.
#include "core/cuda/device.h"
#include "parallel/comm_args.h"
#include "parallel/mpi_comm.h"

namespace tessera {
namespace {

constexpr CommBackend kSelfCpu{"self", Device::cpu, true};
constexpr CommBackend kSelfCuda{"self", Device::cuda, true};

// The backend description matching a tensor's device: a group of one takes either.
const CommBackend& self_backend(const Tensor& t) { return t.device() == Device::cuda ? kSelfCuda : kSelfCpu; }

// The first `count` elements of `from` into `to`, on whichever device the two live.
void copy_elements(const Tensor& from, Tensor& to, int64_t count) {
  if (count <= 0 || tensor_data(from) == tensor_data(to)) return;
  Tensor prefix = to.view(0, {count});
  copy_tensor(prefix, from.view(0, {count}));
}

class SelfComm final : public Comm {
 public:
  SelfComm(std::string name, int world_rank) : name_(std::move(name)), world_ranks_{world_rank} {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }

  Work all_reduce_async(Tensor& t, ReduceOp) override {
    check_all_reduce(*this, self_backend(t), t);
    return Work();
  }
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp) override {
    check_reduce_scatter(*this, self_backend(in), in, out);
    copy_elements(in, out, out.numel());
    return Work();
  }
  Work all_gather_async(const Tensor& in, Tensor& out) override {
    check_all_gather(*this, self_backend(in), in, out);
    copy_elements(in, out, in.numel());
    return Work();
  }
  Work broadcast_async(Tensor& t, int root) override {
    check_broadcast(*this, self_backend(t), t, root);
    return Work();
  }
  Work all_to_all_async(const Tensor& in, Tensor& out) override {
    check_all_to_all(*this, self_backend(in), in, out);
    copy_elements(in, out, in.numel());
    return Work();
  }
  Work all_to_allv_async(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                         const std::vector<int64_t>& recv_counts) override {
    check_all_to_allv(*this, self_backend(in), in, send_counts, out, recv_counts);
    TS_CHECK(send_counts[0] == recv_counts[0], "comm '", name_, "' all_to_allv: this rank sends itself ",
             send_counts[0], " elements but expects to receive ", recv_counts[0]);
    copy_elements(in, out, send_counts[0]);
    return Work();
  }
  Work send_async(const Tensor& t, int peer) override {
    check_peer(*this, self_backend(t), CommOp::send, t, peer);
    return Work();
  }
  Work recv_async(Tensor& t, int peer) override {
    check_peer(*this, self_backend(t), CommOp::recv, t, peer);
    return Work();
  }
  Work barrier_async() override { return Work(); }

 private:
  std::string name_;
  std::vector<int> world_ranks_;
};

}  // namespace

std::shared_ptr<Comm> make_self_comm(std::string name, int world_rank, const CommOptions&) {
  return std::make_shared<SelfComm>(std::move(name), world_rank);
}

}  // namespace tessera
