// The process-wide choice of GPU attention kernel: the default is Tessera's, names parse to kernels and
// an unknown name is refused listing the valid ones, and a build without cuDNN refuses the cudnn kernel
// saying so (a build with it accepts it). Runs without a GPU.
#include <gtest/gtest.h>

#include "ops/attention.h"
#include "support/test_support.h"

namespace tessera {
namespace {

using testing::contains;
using testing::error_of;

TEST(AttentionKernel, DefaultsToTessera) { EXPECT_EQ(attention_kernel(), AttentionKernel::tessera); }

TEST(AttentionKernel, ParsesTheKernelNames) {
  EXPECT_EQ(parse_attention_kernel("tessera"), AttentionKernel::tessera);
  EXPECT_EQ(parse_attention_kernel("cudnn"), AttentionKernel::cudnn);
}

TEST(AttentionKernel, UnknownNameIsRefusedListingTheValidOnes) {
  for (const char* name : {"flash", "cuDNN", "", "tessera "}) {
    const std::string message = error_of([&] { parse_attention_kernel(name); });
    EXPECT_TRUE(contains(message, std::string("'") + name + "'")) << message;
    EXPECT_TRUE(contains(message, "tessera, cudnn")) << message;
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
}

}  // namespace
}  // namespace tessera
