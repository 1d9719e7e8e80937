// Each call forwarded to the host or the device backend by where its tensors live.
#include "parallel/device_routed_comm.h"

#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "parallel/comm_args.h"

namespace tessera {
namespace {

class DeviceRoutedComm final : public Comm {
 public:
  DeviceRoutedComm(std::shared_ptr<Comm> host, std::shared_ptr<Comm> device)
      : host_(std::move(host)), device_(std::move(device)) {
    TS_CHECK(host_->world_ranks() == device_->world_ranks(), "comm '", host_->name(),
             "': the host and device backends must span the same ranks in the same order");
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }

  Work all_reduce_async(Tensor& t, ReduceOp op) override {
    return backend(CommOp::all_reduce, {&t}).all_reduce_async(t, op);
  }
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    return backend(CommOp::reduce_scatter, {&in, &out}).reduce_scatter_async(in, out, op);
  }
  Work all_gather_async(const Tensor& in, Tensor& out) override {
    return backend(CommOp::all_gather, {&in, &out}).all_gather_async(in, out);
  }
  Work broadcast_async(Tensor& t, int root) override {
    return backend(CommOp::broadcast, {&t}).broadcast_async(t, root);
  }
  Work all_to_all_async(const Tensor& in, Tensor& out) override {
    return backend(CommOp::all_to_all, {&in, &out}).all_to_all_async(in, out);
  }
  Work all_to_allv_async(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                         const std::vector<int64_t>& recv_counts) override {
    return backend(CommOp::all_to_allv, {&in, &out}).all_to_allv_async(in, send_counts, out, recv_counts);
  }
  Work send_async(const Tensor& t, int peer) override { return backend(CommOp::send, {&t}).send_async(t, peer); }
  Work recv_async(Tensor& t, int peer) override { return backend(CommOp::recv, {&t}).recv_async(t, peer); }
  Work barrier_async() override { return host_->barrier_async(); }

 private:
  // The backend for the call's tensors, which must all live on one device.
  Comm& backend(CommOp op, std::initializer_list<const Tensor*> tensors) {
    const Device device = (*tensors.begin())->device();
    for (const Tensor* t : tensors)
      TS_CHECK(t->device() == device, "comm '", name(), "' ", comm_op_name(op),
               ": its tensors live on different devices; copy them to one device first");
    return device == Device::cuda ? *device_ : *host_;
  }

  std::shared_ptr<Comm> host_, device_;
};

}  // namespace

std::shared_ptr<Comm> make_device_routed_comm(std::shared_ptr<Comm> host, std::shared_ptr<Comm> device) {
  return std::make_shared<DeviceRoutedComm>(std::move(host), std::move(device));
}

}  // namespace tessera
