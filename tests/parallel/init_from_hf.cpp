// Fine-tuning from a Hugging Face folder (--init-from) in any layout: every tp rank loads its slices,
// every pipeline stage its blocks, every ep rank its experts and every ZeRO-3 rank its shard of the
// folder's weights, so each layout trains exactly as one process that loaded the whole folder. A
// Tessera run folder is a source as its Hugging Face export is.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/train_runs.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

class InitFromHuggingFace : public ::testing::TestWithParam<Layout> {};
class InitFromTesseraCheckpoint : public ::testing::TestWithParam<Layout> {};

// A Hugging Face folder of `model` whose weights have left the initialisation (4 steps of training).
fs::path hf_folder(const char* model, const fs::path& dir, const std::string& shard) {
  train(Layout{1, 1, 0, 8, model}, dir / "source", shard, "--steps 4");
  const std::string cmd = std::string("OMP_NUM_THREADS=1 ") + TESSERA_EXE + " convert --checkpoint " +
                          (dir / "source").string() + " --to-hf " + (dir / "hf").string();
  const testing::CommandResult r = testing::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return dir / "hf";
}

// `run` trained as `ref` did: the losses and the final weights.
void expect_same_training(const RunResult& run, const RunResult& ref) {
  ASSERT_EQ(ref.metrics.size(), 3u);
  ASSERT_EQ(run.metrics.size(), ref.metrics.size());
  for (size_t s = 0; s < ref.metrics.size(); ++s) {
    const double want = ref.metrics[s]["loss"], got = run.metrics[s]["loss"];
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "loss at step " << s + 1;
  }
  ASSERT_EQ(run.weights.size(), ref.weights.size());
  for (size_t t = 0; t < ref.weights.size(); ++t) {
    const auto& [name, want] = ref.weights[t];
    const std::vector<float>& got = run.weights[t].second;
    ASSERT_EQ(got.size(), want.size()) << name;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff += std::pow(double(got[i]) - want[i], 2);
      norm += std::pow(double(want[i]), 2);
    }
    EXPECT_LE(std::sqrt(diff), 1e-4 * std::sqrt(norm) + 1e-3 * 1e-3 * std::sqrt(double(want.size()))) << name;
  }
}

// MoE routing drops by micro-batch, so its reference runs the layout's micro-batches.
Layout one_process_of(const Layout& layout) { return {1, 1, 0, layout.moe() ? layout.micro_batch : 8, layout.model}; }

}  // namespace

TEST_P(InitFromHuggingFace, EveryLayoutStartsFromTheFolderAsOneProcessDoes) {
  const Layout layout = GetParam();
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 31).string();
  const std::string init_from = "--steps 3 --init-from " + hf_folder(layout.model, dir, shard).string();
  const Layout one_process = one_process_of(layout);
  const RunResult fresh = train(one_process, dir / "fresh", shard, "--steps 3");
  const RunResult ref = train(one_process, dir / "reference", shard, init_from);
  const RunResult run = train(layout, dir / layout_name(layout), shard, init_from);
  ASSERT_FALSE(ref.metrics.empty());
  // The folder's weights, not the initialisation, are where training starts.
  const double first = ref.metrics[0]["loss"];
  EXPECT_GT(std::fabs(first - double(fresh.metrics[0]["loss"])), 1e-3 * first);
  expect_same_training(run, ref);
}

// The run folder that hf_folder exported (its newest checkpoint, step 4) starts a layout as the
// export starts one process: the weights alone, from step 1 (no optimizer state, no data position).
TEST_P(InitFromTesseraCheckpoint, ARunFolderStartsTheLayoutAsItsExportDoes) {
  const Layout layout = GetParam();
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 31).string();
  const fs::path hf = hf_folder(layout.model, dir, shard);
  const RunResult ref = train(one_process_of(layout), dir / "reference", shard, "--steps 3 --init-from " + hf.string());
  const RunResult run =
      train(layout, dir / layout_name(layout), shard, "--steps 3 --init-from " + (dir / "source").string());
  ASSERT_FALSE(run.metrics.empty());
  EXPECT_EQ(run.metrics[0]["step"], 1);
  expect_same_training(run, ref);
}

// GPT-2 (transposed Conv1D weights) and Llama (fused q/k/v and gate/up) sliced by tp, cut by pp and
// sharded by ZeRO-3; Mixtral's stacked experts shared out by ep; DeepSeek-V3's latent attention by tp.
INSTANTIATE_TEST_SUITE_P(
    Layouts, InitFromHuggingFace,
    ::testing::Values(Layout{2, 1, 0, 8, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2},
                      Layout{2, 2, 3, 4, "gpt2-tiny"},
                      Layout{2, 1, 0, 8, "llama-tiny", 1, "1f1b", 1, 0, "", 2},
                      Layout{2, 1, 0, 4, "llama-tiny", 2},
                      Layout{4, 2, 3, 4, "llama-tiny", 1, "1f1b", 1, 0, "", 2},
                      Layout{4, 1, 0, 8, "qwen2-tiny", 1, "1f1b", 1, 0, "", 4},  // q/k/v biases, kv heads replicated
                      Layout{4, 2, 3, 4, "qwen2-tiny", 1, "1f1b", 1, 0, "", 2},
                      Layout{2, 2, 1, 4, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2},
                      // DeepSeek-V3: the interleaved RoPE tails reordered in each tp rank's head rows
                      Layout{4, 2, 1, 2, "deepseek-v3-tiny", 1, "1f1b", 1, 0, "", 2}),
    [](const auto& info) { return layout_name(info.param); });

// ZeRO-3 shards and tp slices of a GPT-2; Mixtral's experts shared out by ep.
INSTANTIATE_TEST_SUITE_P(Layouts, InitFromTesseraCheckpoint,
                         ::testing::Values(Layout{2, 2, 3, 4, "gpt2-tiny"},
                                           Layout{2, 2, 1, 4, "mixtral-tiny", 1, "1f1b", 1, 0, "", 1, 2}),
                         [](const auto& info) { return layout_name(info.param); });

}  // namespace tessera
