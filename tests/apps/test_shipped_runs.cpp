// The runs the project ships. `tessera train` with no data flags (`make demo`): the fortunes corpus, its
// 4,096-token tokenizer and gpt2-mini, resumed in place when run again, a new sample each time a finished
// run is run again. configs/*.toml: every key still a flag, so each trains once its data and shape are
// overridden. Two or three steps each, so the whole file takes seconds.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/default_run.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// The default run into `out` for `steps` steps: its exit code and stdout.
testing::CommandResult default_run(const fs::path& out, int steps) {
  return testing::run_command("OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " train --out-dir " + out.string() +
                              " --steps " + std::to_string(steps) + " --eval-every 0 2>&1");
}

// The text after a run's "--- sample ---" line; empty when it printed none.
std::string sample_of(const std::string& output) {
  const size_t at = output.find("--- sample ---");
  return at == std::string::npos ? std::string() : output.substr(at);
}

nlohmann::json checkpoint_model(const fs::path& checkpoint) {
  return nlohmann::json::parse(testing::read_text(checkpoint / "state.json"))["model"];
}

TEST(DefaultRun, TrainsGpt2MiniOnFortunesAndResumesIt) {
  if (!fs::exists(fs::path(kFortunesDir) / "fortunes")) GTEST_SKIP() << "the fortunes package is not installed";
  const fs::path out = testing::scratch_dir() / "demo";

  const testing::CommandResult first = default_run(out, 2);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(testing::contains(first.output, "model: gpt2, 4 layers, 192 wide, 4 heads, vocabulary 4096"))
      << first.output;
  const nlohmann::json model = checkpoint_model(out / "ckpt-00000002");
  EXPECT_EQ(model["num_layers"], 4);
  EXPECT_EQ(model["channels"], 192);
  EXPECT_EQ(model["vocab_size"], 4096);  // the demo tokenizer's, not the preset's 50257

  // Run again with more steps: it continues its folder with the same model.
  const testing::CommandResult second = default_run(out, 3);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(testing::contains(second.output, "resumed from step 2")) << second.output;
  EXPECT_EQ(checkpoint_model(out / "ckpt-00000003"), model);

  // Run again when finished: it says so and shows another sample each time (160 tokens drawn at
  // temperature 0.8: two alike by chance are out of the question).
  const testing::CommandResult again = default_run(out, 3), once_more = default_run(out, 3);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  ASSERT_EQ(once_more.exit_code, 0) << once_more.output;
  EXPECT_TRUE(testing::contains(again.output, "already finished at step 3")) << again.output;
  EXPECT_NE(sample_of(again.output), sample_of(once_more.output));
}

TEST(ShippedConfigs, EachTrainsWithItsDataAndShapeOverridden) {
  const fs::path dir = testing::scratch_dir();
  std::string text;
  for (int i = 0; i < 200; ++i) text += "The quick brown fox " + std::to_string(i % 17) + " jumps over the lazy dog.\n";
  testing::write_text(dir / "corpus.txt", text);
  const std::string d = dir.string(), tessera = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE);
  ASSERT_EQ(testing::run_command(tessera + " tokenizer-train --in " + d + "/corpus.txt --vocab-size 300 --out " + d +
                                 "/tokenizer.json && " + tessera + " tokenize --tokenizer " + d + "/tokenizer.json --in " +
                                 d + "/corpus.txt --out " + d + "/data")
                .exit_code,
            0);
  int configs = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(TESSERA_SOURCE_DIR) / "configs")) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    configs++;
    const fs::path out = dir / e.path().stem();
    const testing::CommandResult r = testing::run_command(
        tessera + " train --config " + e.path().string() + " --model gpt2-tiny --tokenizer " + d +
        "/tokenizer.json --train-data '" + d + "/data/train_*.bin' --val-data '" + d + "/data/train_*.bin'" +
        " --batch-size 4 --micro-batch-size 4 --seq-len 16 --steps 2 --quiet --out-dir " + out.string() + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(out / "ckpt-00000002" / "state.json")) << r.output;
  }
  EXPECT_GT(configs, 0) << "no configs/*.toml";
}

}  // namespace
}  // namespace tessera
