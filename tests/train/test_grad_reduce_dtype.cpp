// --grad-reduce-dtype bf16 compresses what travels between data-parallel ranks; a run on one rank
// sends nothing, so its gradients stay fp32 and it trains bit for bit as with fp32, under every
// ZeRO stage (it rounded them to bf16 for nothing until 2026-11-28).
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

TEST(GradReduceDtype, OneRankTrainsAsFp32) {
  auto dir = testing::scratch_dir();
  for (int zero : {0, 1, 2, 3}) {
    std::vector<std::vector<nlohmann::json>> runs;
    for (const char* dtype : {"fp32", "bf16"}) {
      TrainConfig c = testing::tiny_run(dir);
      c.steps = 3;
      c.zero = zero;
      c.grad_reduce_dtype = dtype;
      c.out_dir = (dir / ("zero" + std::to_string(zero) + dtype)).string();
      Trainer(c).run();
      runs.push_back(testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl"));
    }
    ASSERT_EQ(runs[0].size(), 3u);
    ASSERT_EQ(runs[1].size(), 3u);
    for (size_t s = 0; s < 3; ++s)
      for (const char* key : {"loss", "grad_norm"})
        EXPECT_EQ(runs[1][s][key].get<double>(), runs[0][s][key].get<double>())
            << key << " at step " << s + 1 << ", --zero " << zero;
  }
}

}  // namespace
}  // namespace tessera
