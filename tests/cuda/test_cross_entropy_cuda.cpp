// Fused softmax + cross-entropy on the GPU against the CPU over a padded vocabulary: losses,
// in-place dlogits with zero padding, and logits left untouched when no gradient is asked for.
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

}  // namespace
}  // namespace tessera
