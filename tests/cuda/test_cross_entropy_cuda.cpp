// Fused softmax + cross-entropy on the GPU against the CPU over a padded vocabulary: losses,
// in-place dlogits with zero padding, and logits left untouched when no gradient is asked for; fp32,
// and bf16 logits against the fp32 CPU op on the same (bf16-rounded) logits. bf16 logits on the CPU
// are refused.
#include <gtest/gtest.h>

#include "cuda/cuda_testing.h"
#include "ops/cross_entropy.h"

namespace tessera {
namespace {

using testing::random_tensor;
using testing::to_gpu;

class CrossEntropyCuda : public testing::CudaTest {};

TEST_F(CrossEntropyCuda, LossesAndGradientsMatchCpu) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 66, V = 1000, Vp = 1024;
  const float dloss = 1.0f / float(N);
  Tensor logits = random_tensor({N, Vp}, seed, -6.0f, 6.0f);
  Tensor logits_gpu = to_gpu(logits);
  const Tensor targets = testing::random_ids({N}, V, seed + 1);
  const Tensor targets_gpu = to_gpu(targets);

  Tensor losses = Tensor::zeros({N});
  Tensor losses_gpu = testing::poisoned_gpu({N});
  softmax_cross_entropy(losses_gpu, logits_gpu, targets_gpu, V, 0.0f);  // forward only
  testing::expect_matches_cpu(logits_gpu, logits, 0.0, 0.0, 0.0, "logits after a forward-only call");

  softmax_cross_entropy(losses, logits, targets, V, dloss);
  softmax_cross_entropy(losses_gpu, logits_gpu, targets_gpu, V, dloss);
  testing::expect_matches_cpu(losses_gpu, losses, 1e-6, 1e-5, 1e-5, "losses");
  testing::expect_matches_cpu(logits_gpu, logits, 1e-5, 1e-7, 1e-4, "dlogits");
  const Tensor dlogits = testing::to_cpu(logits_gpu);
  for (int64_t n = 0; n < N; n++)
    for (int64_t v = V; v < Vp; v++) ASSERT_EQ(dlogits.f32()[n * Vp + v], 0.0f) << "padding at " << n << "," << v;
}

// bf16 logits, f32 losses. The GPU computes in fp32 from the same rounded logits as the CPU: losses
// keep the fp32 tolerances; dlogits, rounded once to bf16, get them doubled plus half a bf16 ulp.
TEST_F(CrossEntropyCuda, Bf16MatchesCpuOnRoundedLogits) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 66, V = 1000, Vp = 1024;
  const float dloss = 1.0f / float(N);
  Tensor logits = testing::rounded_to_bf16(random_tensor({N, Vp}, seed, -6.0f, 6.0f));
  Tensor logits_gpu = testing::to_gpu_as(logits, DType::bf16);
  const Tensor targets = testing::random_ids({N}, V, seed + 1);
  const Tensor targets_gpu = to_gpu(targets);

  Tensor losses = Tensor::zeros({N});
  Tensor losses_gpu = testing::poisoned_gpu({N});
  softmax_cross_entropy(losses_gpu, logits_gpu, targets_gpu, V, 0.0f);  // forward only
  testing::expect_matches_cpu(logits_gpu, logits, 0.0, 0.0, 0.0, "bf16 logits after a forward-only call");

  softmax_cross_entropy(losses, logits, targets, V, dloss);
  softmax_cross_entropy(losses_gpu, logits_gpu, targets_gpu, V, dloss);
  testing::expect_matches_cpu(losses_gpu, losses, 1e-6, 1e-5, 1e-5, "losses from bf16 logits");
  testing::expect_matches_cpu(logits_gpu, logits, 1e-2, 2e-7, testing::kBf16Rounding + 2e-4, "bf16 dlogits");
  const Tensor dlogits = testing::to_f32(testing::to_cpu(logits_gpu));
  for (int64_t n = 0; n < N; n++)
    for (int64_t v = V; v < Vp; v++) ASSERT_EQ(dlogits.f32()[n * Vp + v], 0.0f) << "padding at " << n << "," << v;
}

// CPU kernels are the fp32 reference: bf16 logits on the CPU are an error naming the dtype.
TEST(CrossEntropyDtype, Bf16OnTheCpuIsRefused) {
  Tensor losses = Tensor::zeros({2}), logits = Tensor::zeros({2, 8}, DType::bf16);
  const Tensor targets = Tensor::zeros({2}, DType::i32);
  const std::string message = testing::error_of([&] { softmax_cross_entropy(losses, logits, targets, 8, 1.0f); });
  EXPECT_TRUE(testing::contains(message, "bf16")) << message;
}

}  // namespace
}  // namespace tessera
