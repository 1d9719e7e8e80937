// fp16 training on the GPU with dynamic loss scaling: started at a scale whose loss gradient cannot
// fit in fp16, the trainer skips updates (logged in the metrics as skipped, the scale halving each
// time) until the scale fits, then trains: the overflowed steps never reach the weights.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/cuda_testing.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

class LossScalingCuda : public testing::CudaTest {};

TEST_F(LossScalingCuda, Fp16OverflowSkipsStepsUntilTheScaleFits) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.device = "cuda";
  c.dtype = "fp16";
  c.steps = 30;
  c.loss_scale = 0x1p40;  // dloss = 2^40 / (4 * 16) = 2^34, far past fp16's 65504
  Trainer trainer(c);
  trainer.run();
  const auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 30u);
  double expected_scale = 0x1p40;
  int skipped = 0;
  for (const auto& line : lines) {
    SCOPED_TRACE(line.dump());
    ASSERT_TRUE(std::isfinite(line["loss"].get<double>()));
    if (line.contains("skipped")) {
      ++skipped;
      expected_scale /= 2;
      EXPECT_FALSE(line.contains("grad_norm"));
    } else {
      EXPECT_TRUE(std::isfinite(line["grad_norm"].get<double>()));
    }
    EXPECT_EQ(line["loss_scale"].get<double>(), expected_scale);
  }
  EXPECT_GE(skipped, 18) << "2^34 must come down to below 2^16 before a gradient fits";
  EXPECT_FALSE(lines.back().contains("skipped")) << "training continues once the scale fits";
  const Tensor params = testing::to_cpu(trainer.model().params());
  for (int64_t i = 0; i < params.numel(); ++i) ASSERT_TRUE(std::isfinite(params.f32()[i])) << "weight " << i;
}

}  // namespace
}  // namespace tessera
