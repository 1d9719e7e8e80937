// The CUDA runtime layer: device tensors start zeroed and round-trip through copies, column copies
// equal the host's, the caching allocator counts and reuses, out of memory names the knobs; without a
// device, a clear error.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"

namespace tessera {
namespace {

using testing::CudaTest;

TEST(CudaDevice, WithoutADeviceCudaTensorsGiveAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::string message = testing::error_of([] { Tensor::zeros({4}, DType::f32, Device::cuda); });
  EXPECT_TRUE(testing::contains(message, "run on CPU tensors")) << message;
}

class CudaDeviceTest : public CudaTest {};

TEST_F(CudaDeviceTest, ZerosAndCopiesRoundTrip) {
  const Tensor zeros = testing::to_cpu(Tensor::zeros({3, 5}, DType::f32, Device::cuda));
  for (int64_t i = 0; i < zeros.numel(); i++) EXPECT_EQ(zeros.f32()[i], 0.0f);
  const Tensor host = testing::random_tensor({7, 9}, testing::fresh_seed());
  const Tensor back = testing::to_cpu(testing::to_gpu(host));
  testing::expect_identical(back, host, "round trip");
}

// copy_columns on the GPU (cudaMemcpy2DAsync, what all-to-all context parallelism regroups with) moves
// the same elements as on the host, in 4-byte and 2-byte elements.
TEST_F(CudaDeviceTest, CopyColumnsMatchesTheHost) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor src = testing::to_storage(testing::random_tensor({5, 24}, testing::fresh_seed()), dtype);
    Tensor host = Tensor::zeros({5, 40}, dtype), device = Tensor::zeros({5, 40}, dtype, Device::cuda);
    copy_columns(host, 7, src, 3, 5, 17);
    copy_columns(device, 7, testing::to_gpu(src), 3, 5, 17);
    testing::expect_identical(testing::to_f32(testing::to_cpu(device)), testing::to_f32(host),
                              std::string(dtype_name(dtype)).c_str());
  }
}

TEST_F(CudaDeviceTest, AllocatorCountsAndReusesFreedBlocks) {
  const AllocatorStats before = device_allocator_stats();
  device_allocator_reset_peak();
  {
    Tensor a = Tensor::zeros({1000}, DType::f32, Device::cuda);
    EXPECT_EQ(device_allocator_stats().current_bytes, before.current_bytes + 4000);
  }
  EXPECT_EQ(device_allocator_stats().current_bytes, before.current_bytes);
  EXPECT_GE(device_allocator_stats().peak_bytes, before.current_bytes + 4000);
  const size_t mallocs = device_allocator_stats().allocations;
  { Tensor b = Tensor::zeros({1000}, DType::f32, Device::cuda); }  // same size class: from the cache
  EXPECT_EQ(device_allocator_stats().allocations, mallocs);
}

TEST_F(CudaDeviceTest, OutOfMemoryNamesBytesAndKnobs) {
  const std::string message = testing::error_of([] { device_allocate(size_t(1) << 50); });
  EXPECT_TRUE(testing::contains(message, "out of GPU memory")) << message;
  EXPECT_TRUE(testing::contains(message, std::to_string(size_t(1) << 50))) << message;
  EXPECT_TRUE(testing::contains(message, "--micro-batch-size")) << message;
  EXPECT_TRUE(testing::contains(message, "--zero")) << message;
  EXPECT_TRUE(testing::contains(message, "--optimizer-moments bf16")) << message;
}

}  // namespace
}  // namespace tessera
