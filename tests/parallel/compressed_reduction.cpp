// Compressed data-parallel reductions against the same layout reduced in fp32. Gradients reduced in
// bf16 (--grad-reduce-dtype bf16) under ZeRO 0, 2 and 3 track it within bf16's rounding; PowerSGD
// (--powersgd-rank) under ZeRO 0 and 1 keeps the first step's loss and stays within a few per
// cent of the losses after it. Both differ from it (the compression is applied, not ignored).
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/train_runs.h"
#include "support/test_support.h"

namespace tessera {
namespace {

class CompressedReduction : public ::testing::TestWithParam<Layout> {};

TEST_P(CompressedReduction, TracksTheFp32Reduction) {
  const Layout layout = GetParam();
  const std::filesystem::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 23).string();
  const RunResult fp32 = train(layout, dir / "fp32", shard);
  const RunResult bf16 = train(layout, dir / "bf16", shard, "--steps 4 --grad-reduce-dtype bf16");
  ASSERT_EQ(bf16.metrics.size(), fp32.metrics.size());
  ASSERT_FALSE(fp32.metrics.empty());
  double largest_norm_gap = 0.0;
  for (size_t s = 0; s < fp32.metrics.size(); ++s) {
    const double loss = fp32.metrics[s]["loss"], norm = fp32.metrics[s]["grad_norm"];
    const double compressed_loss = bf16.metrics[s]["loss"], compressed_norm = bf16.metrics[s]["grad_norm"];
    // bf16 keeps 8 significant bits: each gradient element within a few 2^-9 relative.
    EXPECT_NEAR(compressed_norm, norm, 1e-2 * norm) << "step " << s + 1;
    EXPECT_NEAR(compressed_loss, loss, 1e-3 * loss) << "step " << s + 1;
    largest_norm_gap = std::max(largest_norm_gap, std::fabs(compressed_norm - norm) / norm);
  }
  EXPECT_GT(largest_norm_gap, 1e-7) << "the bf16 reduction gave the fp32 one's gradients bit for bit";
}

INSTANTIATE_TEST_SUITE_P(Layouts, CompressedReduction,
                         ::testing::Values(Layout{2, 2, 0, 2}, Layout{4, 4, 2, 1}, Layout{2, 2, 3, 1},
                                           Layout{4, 2, 1, 2, "llama-tiny", 1, "1f1b", 1, 0, "", 2}),
                         [](const ::testing::TestParamInfo<Layout>& info) { return layout_name(info.param); });

class PowerSgdReduction : public ::testing::TestWithParam<Layout> {};

TEST_P(PowerSgdReduction, StaysNearTheFp32Reduction) {
  const Layout layout = GetParam();
  const std::filesystem::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 23).string();
  const RunResult fp32 = train(layout, dir / "fp32", shard, "--steps 6");
  const RunResult factored = train(layout, dir / "powersgd", shard, "--steps 6 --powersgd-rank 2");
  ASSERT_EQ(factored.metrics.size(), fp32.metrics.size());
  ASSERT_EQ(fp32.metrics.size(), 6u);
  EXPECT_NEAR(factored.metrics[0]["loss"].get<double>(), fp32.metrics[0]["loss"].get<double>(),
              1e-6 * fp32.metrics[0]["loss"].get<double>());
  double largest_norm_gap = 0.0;
  for (size_t s = 0; s < fp32.metrics.size(); ++s) {
    const double loss = fp32.metrics[s]["loss"], norm = fp32.metrics[s]["grad_norm"];
    EXPECT_NEAR(factored.metrics[s]["loss"].get<double>(), loss, 0.03 * loss) << "step " << s + 1;
    largest_norm_gap = std::max(largest_norm_gap, std::fabs(factored.metrics[s]["grad_norm"].get<double>() - norm) / norm);
  }
  EXPECT_GT(largest_norm_gap, 1e-3) << "the PowerSGD reduction gave the fp32 one's gradients";
}

INSTANTIATE_TEST_SUITE_P(Layouts, PowerSgdReduction,
                         ::testing::Values(Layout{2, 2, 0, 2}, Layout{4, 4, 1, 1}, Layout{2, 2, 1, 2, "llama-tiny"}),
                         [](const ::testing::TestParamInfo<Layout>& info) { return layout_name(info.param); });

}  // namespace
}  // namespace tessera
