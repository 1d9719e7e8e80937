// Compressed data-parallel reductions against the same layout reduced in fp32. Gradients reduced in
// bf16 (--grad-reduce-dtype bf16) under ZeRO 0, 2 and 3 track it within bf16's rounding; PowerSGD
// (--powersgd-rank) under ZeRO 0 and 1 keeps the first step's loss and stays within a few per
// cent of the losses after it. Both differ from it (the compression is applied, not ignored).
// PowerSGD's state survives a checkpoint (resharding rows: layout_equivalence.cpp).
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

// Layouts whose compression is their own (tp compresses slices; a pipeline compresses the tied
// embedding's two copies apart): stopped, checkpointed and resumed in the same layout, they continue
// their own trajectory; resumed under another tp, the factors start afresh and the run says so.
TEST(PowerSgdResume, ContinuesItsOwnLayoutAndSaysWhatStartsAfresh) {
  const std::filesystem::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 23).string();
  const std::string flags = " --lr-schedule constant --powersgd-rank 2";
  const Layout layouts[] = {{4, 2, 1, 2, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2}, {4, 2, 0, 2, "gpt2-tiny", 2, "1f1b"}};
  for (const Layout& l : layouts) {
    const std::filesystem::path run = dir / layout_name(l);
    const RunResult straight = train(l, run / "straight", shard, "--steps 4" + flags);
    train(l, run / "resumed", shard, "--steps 2" + flags);
    const RunResult resumed = train(l, run / "resumed", shard, "--steps 4 --resume" + flags);
    ASSERT_EQ(resumed.metrics.size(), 4u) << layout_name(l);
    for (size_t s = 2; s < 4; ++s)
      for (const char* key : {"loss", "grad_norm"}) {
        const double want = straight.metrics[s][key], got = resumed.metrics[s][key];
        EXPECT_NEAR(got, want, 1e-6 * std::fabs(want)) << layout_name(l) << " " << key << " at step " << s + 1;
      }
  }
  // The dp2·tp2 checkpoint under dp4: the error sums reshard, the factors of tp slices cannot.
  const std::string tp_checkpoint_run = (dir / layout_name(layouts[0]) / "resumed").string();
  std::filesystem::copy(tp_checkpoint_run, dir / "to_dp4", std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  testing::CommandResult r = testing::run_command(
      train_command(Layout{4, 4, 1, 2}, dir / "to_dp4", shard, "--steps 5 --resume" + flags));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "warm-start factors start afresh: the checkpoint's were made under another "
                                          "--tp or --powersgd-rank")) << r.output;
  // A checkpoint saved without PowerSGD, resumed with it.
  train(Layout{2, 2, 0, 2}, dir / "plain", shard, "--steps 1");
  r = testing::run_command(train_command(Layout{2, 2, 0, 2}, dir / "plain", shard, "--steps 2 --resume" + flags));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "the checkpoint holds no PowerSGD state")) << r.output;
}

}  // namespace
}  // namespace tessera
