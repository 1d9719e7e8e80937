// Device tensors staged through host copies around a host-only communicator.
#include "parallel/host_staged_comm.h"

#include <utility>
#include <vector>

#include "core/cuda/device.h"
#include "parallel/work_state.h"

namespace tessera {
namespace {

// The backend's Work, then the host results copied into their device tensors.
class StagedWork final : public Work::State {
 public:
  StagedWork(Work inner, std::vector<std::pair<Tensor, Tensor>> copy_back)
      : inner_(std::move(inner)), copy_back_(std::move(copy_back)) {}

  void wait() override {
    inner_.wait();
    for (auto& [device, host] : copy_back_) copy_tensor(device, host);
    copy_back_.clear();
  }
  bool done() const override { return inner_.done(); }

 private:
  Work inner_;
  std::vector<std::pair<Tensor, Tensor>> copy_back_;  // (device destination, host source)
};

class HostStagedComm final : public Comm {
 public:
  explicit HostStagedComm(std::shared_ptr<Comm> host) : host_(std::move(host)) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }

  Work all_reduce_async(Tensor& t, ReduceOp op) override {
    Staging s;
    Tensor h = s.in_out(t);
    return s.finish(host_->all_reduce_async(h, op));
  }
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    Staging s;
    Tensor h = s.out(out);
    return s.finish(host_->reduce_scatter_async(s.in(in), h, op));
  }
  Work all_gather_async(const Tensor& in, Tensor& out) override {
    Staging s;
    Tensor h = s.out(out);
    return s.finish(host_->all_gather_async(s.in(in), h));
  }
  Work broadcast_async(Tensor& t, int root) override {
    Staging s;
    Tensor h = s.in_out(t);
    return s.finish(host_->broadcast_async(h, root));
  }
  Work all_to_all_async(const Tensor& in, Tensor& out) override {
    Staging s;
    Tensor h = s.out(out);
    return s.finish(host_->all_to_all_async(s.in(in), h));
  }
  Work all_to_allv_async(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                         const std::vector<int64_t>& recv_counts) override {
    Staging s;
    Tensor h = s.out(out);
    return s.finish(host_->all_to_allv_async(s.in(in), send_counts, h, recv_counts));
  }
  Work send_async(const Tensor& t, int peer) override {
    Staging s;
    return s.finish(host_->send_async(s.in(t), peer));
  }
  Work recv_async(Tensor& t, int peer) override {
    Staging s;
    Tensor h = s.out(t);
    return s.finish(host_->recv_async(h, peer));
  }
  Work barrier_async() override { return host_->barrier_async(); }

 private:
  // The host side of one call's tensors, and which device tensors get results back.
  struct Staging {
    std::vector<std::pair<Tensor, Tensor>> copy_back;

    // An input: a host copy (the device's compute stream is synchronised by the copy).
    Tensor in(const Tensor& t) { return t.device() == Device::cpu ? t : tensor_to(t, Device::cpu); }
    // An output: a host buffer whose contents go back to `t` at wait().
    Tensor out(Tensor& t) {
      if (t.device() == Device::cpu) return t;
      Tensor host = Tensor::zeros(t.shape(), t.dtype());
      copy_back.emplace_back(t, host);
      return host;
    }
    // Both: the host copy, written back at wait().
    Tensor in_out(Tensor& t) {
      if (t.device() == Device::cpu) return t;
      Tensor host = tensor_to(t, Device::cpu);
      copy_back.emplace_back(t, host);
      return host;
    }
    Work finish(Work inner) {
      if (copy_back.empty()) return inner;
      return Work(std::make_shared<StagedWork>(std::move(inner), std::move(copy_back)));
    }
  };

  std::shared_ptr<Comm> host_;
};

}  // namespace

std::shared_ptr<Comm> make_host_staged_comm(std::shared_ptr<Comm> host_comm) {
  return std::make_shared<HostStagedComm>(std::move(host_comm));
}

}  // namespace tessera
