// The process-wide choice of GPU attention kernel: the default is auto, names parse to kernels and back and
// an unknown name is refused listing the valid ones, and a build without cuDNN refuses the cudnn kernel
// saying so (a build with it accepts it); cuDNN's backward workspace and auto's limit on it; the kernels
// are deterministic unless switched off. Runs without a GPU.
#include <gtest/gtest.h>

#include "core/cuda/device.h"
#include "ops/attention.h"
#include "ops/deterministic_kernels.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using testing::contains;
using testing::error_of;

TEST(AttentionKernel, DefaultsToAuto) { EXPECT_EQ(attention_kernel(), AttentionKernel::automatic); }

TEST(AttentionKernel, ParsesTheKernelNames) {
  EXPECT_EQ(parse_attention_kernel("auto"), AttentionKernel::automatic);
  EXPECT_EQ(parse_attention_kernel("tessera"), AttentionKernel::tessera);
  EXPECT_EQ(parse_attention_kernel("cudnn"), AttentionKernel::cudnn);
  for (const AttentionKernel kernel : {AttentionKernel::automatic, AttentionKernel::tessera, AttentionKernel::cudnn})
    EXPECT_EQ(parse_attention_kernel(attention_kernel_name(kernel)), kernel);
}

TEST(AttentionKernel, UnknownNameIsRefusedListingTheValidOnes) {
  for (const char* name : {"flash", "cuDNN", "", "tessera "}) {
    const std::string message = error_of([&] { parse_attention_kernel(name); });
    EXPECT_TRUE(contains(message, std::string("'") + name + "'")) << message;
    EXPECT_TRUE(contains(message, "auto, tessera, cudnn")) << message;
  }
}

TEST(AttentionKernel, CudnnNeedsABuildWithCudnn) {
#ifdef TESSERA_WITH_CUDNN
  set_attention_kernel(AttentionKernel::cudnn);
  EXPECT_EQ(attention_kernel(), AttentionKernel::cudnn);
#else
  const std::string message = error_of([] { set_attention_kernel(AttentionKernel::cudnn); });
  EXPECT_TRUE(contains(message, "no cuDNN")) << message;
#endif
  set_attention_kernel(AttentionKernel::tessera);
  EXPECT_EQ(attention_kernel(), AttentionKernel::tessera);
  set_attention_kernel(AttentionKernel::automatic);  // every build takes auto
  EXPECT_EQ(attention_kernel(), AttentionKernel::automatic);
}

// cuDNN's backward scratch: dS of every head (T rounded up to 64, 2 bytes) when deterministic, the fp32
// dq accumulator otherwise; auto keeps cuDNN up to 2 GiB of it, cudnn at any size, tessera never.
TEST(AttentionKernel, CudnnWorkspaceAndTheAutoLimit) {
  EXPECT_EQ(cudnn_attention_workspace_bytes(64, 12, 1024, 64, true), int64_t(64) * 12 * 1024 * 1024 * 2);
  EXPECT_EQ(cudnn_attention_workspace_bytes(2, 3, 131, 64, true), int64_t(2) * 3 * 192 * 192 * 2);
  EXPECT_EQ(cudnn_attention_workspace_bytes(2, 3, 131, 64, false), int64_t(2) * 3 * 131 * 64 * 4);
  const int64_t llama_8k = cudnn_attention_workspace_bytes(1, 32, 8192, 128, true);
  EXPECT_EQ(llama_8k, int64_t(4) << 30);
  EXPECT_TRUE(cudnn_attention_allowed(AttentionKernel::automatic, kCudnnAttentionWorkspaceLimit));
  EXPECT_FALSE(cudnn_attention_allowed(AttentionKernel::automatic, llama_8k));
  EXPECT_TRUE(cudnn_attention_allowed(AttentionKernel::cudnn, llama_8k));
  EXPECT_FALSE(cudnn_attention_allowed(AttentionKernel::tessera, 0));
}

// Off the GPU (and in a build without cuDNN) every choice reports Tessera's kernels.
TEST(AttentionKernel, WithoutAGpuTheReportIsTessera) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: the report may be cudnn";
  for (const AttentionKernel kernel : {AttentionKernel::automatic, AttentionKernel::tessera}) {
    set_attention_kernel(kernel);
    EXPECT_EQ(attention_kernel_for(16, 12, 1024, 64, false), AttentionKernel::tessera);
  }
  set_attention_kernel(AttentionKernel::automatic);
}

TEST(DeterministicKernels, OnUntilSwitchedOff) {
  EXPECT_TRUE(deterministic_kernels());
  set_deterministic_kernels(false);
  EXPECT_FALSE(deterministic_kernels());
  set_deterministic_kernels(true);
  EXPECT_TRUE(deterministic_kernels());
}

}  // namespace
}  // namespace tessera
