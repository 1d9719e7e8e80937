// Side-stream copies to the host (core/cuda/side_copies.h), with a source large enough that its copy
// takes milliseconds: a copy sees the work queued on the compute stream before it was added, and
// work queued after compute_waits() does not reach it; views copy their own bytes; without a device
// the copy is refused.
#include <gtest/gtest.h>

#include "core/cuda/side_copies.h"
#include "cuda/cuda_testing.h"

namespace tessera {
namespace {

using testing::CudaTest;

class SideCopiesCuda : public CudaTest {};

TEST_F(SideCopiesCuda, CopiesTheSourceAsQueuedAndLaterWritesWaitForThem) {
  const int64_t n = int64_t(64) << 20;  // 256 MiB: several milliseconds over PCIe, microseconds to zero
  Tensor values = Tensor::zeros({n}), source = Tensor::zeros({n}, DType::f32, Device::cuda);
  for (int64_t i = 0; i < n; i += 4099) values.f32()[i] = float(i % 1000) + 1.0f;
  const Tensor staged = testing::to_gpu(values);
  Tensor host = Tensor::zeros({n});
  PinnedHost pinned(host);
  SideCopies copies;
  copy_device_to_device(source.raw_data(), staged.raw_data(), staged.bytes());  // queued, not yet run
  copies.add(host, source);
  copies.compute_waits();
  zero_tensor(source);  // queued after the wait: must not reach the copy
  copies.wait();
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(host.f32()[i], values.f32()[i]) << i;
  EXPECT_EQ(testing::to_cpu(source).f32()[0], 0.0f) << "the compute stream went on after the copy";
}

TEST_F(SideCopiesCuda, ViewsCopyTheirOwnBytes) {
  const Tensor source = testing::to_gpu(testing::random_tensor({1000}, testing::fresh_seed()));
  Tensor host = Tensor::zeros({300});
  SideCopies copies;
  copies.add(host.view(100, {200}), source.view(700, {200}));
  copies.add(host.view(0, {100}), source.view(0, {100}));
  copies.wait();
  const Tensor want = testing::to_cpu(source);
  for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(host.f32()[i], want.f32()[i]) << i;
  for (int64_t i = 0; i < 200; ++i) ASSERT_EQ(host.f32()[100 + i], want.f32()[700 + i]) << i;
  const std::string message = testing::error_of([&] { copies.add(host, source); });
  EXPECT_TRUE(testing::contains(message, "into a host one of its size")) << message;
}

}  // namespace
}  // namespace tessera
