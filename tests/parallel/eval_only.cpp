// `train --eval-only`: a run trained in one process, validated again by its checkpoint under
// tp2 x pp2 on 4 ranks, prints the val_loss the run logged at that step (the same batches, another
// layout) and leaves the run folder as it was; without --val-data it is refused in one line. --choices
// scores alike under dp (rows dealt unevenly), tp, cp, ZeRO-3 and pp.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <regex>

#include "parallel/train_runs.h"

namespace tessera {
namespace {

TEST(EvalOnly, ValidatesTheCheckpointInAnotherLayoutWritingNothing) {
  const std::filesystem::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 29).string();
  const std::string validation = " --steps 3 --val-data " + shard + " --eval-batches 4";
  const RunResult trained = train(Layout{1, 1, 0, 4}, dir / "run", shard, validation);
  ASSERT_FALSE(trained.metrics.empty());
  const nlohmann::json& logged = trained.metrics.back();
  ASSERT_TRUE(logged.contains("val_loss")) << logged.dump();
  ASSERT_EQ(logged["step"], 3);

  const auto before = testing::folder_snapshot(dir / "run");
  const Layout tp_pp{4, 1, 0, 4, "gpt2-tiny", 2, "1f1b", 1, 0, "", 2};
  const std::string command = train_command(tp_pp, dir / "run", shard, validation + " --resume --eval-only");
  const testing::CommandResult r = testing::run_command(command);
  ASSERT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("step 3: val_loss ([0-9.]+)"))) << r.output;
  EXPECT_NEAR(std::stod(m[1]), logged["val_loss"].get<double>(), 1e-4) << r.output;  // printed to 4 decimals
  EXPECT_TRUE(before == testing::folder_snapshot(dir / "run")) << "--eval-only changed the run folder";

  const testing::CommandResult refused =
      testing::run_command(train_command(Layout{1, 1, 0, 4}, dir / "run", shard, "--steps 3 --resume --eval-only"));
  testing::expect_one_line_error(refused, "add --val-data");
}

// Multiple-choice lines of random words (the tokenizer's text): four choices, three in the last
// example, of 1 to 3 words, so every choice fits the harness's --seq-len 16.
std::string random_choices(int examples) {
  const std::vector<std::string> words = {"the", "a", "man", "dog", "runs", "over", "under", "red", "roof", "tree"};
  std::mt19937 rng(5);
  const auto phrase = [&](int n) {
    std::string text;
    for (int i = 0; i < n; ++i) text += (i ? " " : "") + words[rng() % words.size()];
    return text;
  };
  std::string lines;
  for (int e = 0; e < examples; ++e) {
    nlohmann::json choices = nlohmann::json::array();
    for (int c = 0; c < (e + 1 == examples ? 3 : 4); ++c) choices.push_back(phrase(1 + int(rng() % 3)));
    lines += nlohmann::json{{"ctx", phrase(2 + int(rng() % 12))}, {"endings", choices}, {"label", e % 4}}.dump() + "\n";
  }
  return lines;
}

TEST(EvalOnly, ScoresChoicesAlikeInEveryLayout) {
  const std::filesystem::path dir = testing::scratch_dir();
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the man runs over a red roof under the tree and the dog runs after\n";
  testing::write_text(dir / "text.txt", text);
  // 107 rows: 27 forwards of 4 (the last padded), 14 and 13 on two dp ranks.
  testing::write_text(dir / "choices.jsonl", random_choices(27));
  const testing::CommandResult made = testing::run_command(std::string(TESSERA_EXE) + " tokenizer-train --vocab-size 300 --in " +
                                                           (dir / "text.txt").string() + " --out " + (dir / "tok.json").string());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 31).string();
  // --seq-len 64 (the harness's 16 overridden): the rows' forwards are narrower, 32 wide.
  const std::string flags = " --steps 3 --seq-len 64 --tokenizer " + (dir / "tok.json").string() + " --choices " +
                            (dir / "choices.jsonl").string();
  const RunResult trained = train(Layout{1, 1, 0, 4}, dir / "run", shard, flags);
  ASSERT_FALSE(trained.metrics.empty());
  const nlohmann::json& logged = trained.metrics.back();
  ASSERT_TRUE(logged.contains("choices_loss")) << logged.dump();
  ASSERT_EQ(logged["step"], 3);
  EXPECT_GT(logged["choices_loss"].get<double>(), 4.0);  // near log(300) a token, barely trained
  // tessera eval, batching by its own rule, gives the training's figures.
  const testing::CommandResult eval = testing::run_command(std::string(TESSERA_EXE) + " eval --device cpu --checkpoint " +
                                                           (dir / "run").string() + " --seq-len 64 --choices " +
                                                           (dir / "choices.jsonl").string());
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  std::smatch e;
  ASSERT_TRUE(std::regex_search(eval.output, e, std::regex(" loss ([0-9.]+) over 27 examples"))) << eval.output;
  EXPECT_NEAR(std::stod(e[1]), logged["choices_loss"].get<double>(), 1e-4) << eval.output;
  const auto four_places = [](double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4f", x);
    return std::string(text);
  };
  const std::string expected_counts = " acc_norm " + four_places(logged["choices_acc_norm"].get<double>()) + " acc " +
                                      four_places(logged["choices_acc"].get<double>()) + " loss ";
  for (const Layout& l : {Layout{2, 2, 0, 4}, Layout{2, 1, 0, 4, "gpt2-tiny", 1, "1f1b", 1, 0, "", 2},
                          Layout{2, 1, 0, 4, "gpt2-tiny", 1, "1f1b", 1, 0, "--cp-comm all-to-all", 1, 1, 2},
                          Layout{2, 2, 3, 4}, Layout{2, 1, 0, 4, "gpt2-tiny", 2}, Layout{4, 2, 0, 4, "gpt2-tiny", 2}}) {
    const std::string command = train_command(l, dir / "run", shard, flags + " --resume --eval-only");
    const testing::CommandResult r = testing::run_command(command);
    ASSERT_EQ(r.exit_code, 0) << command << "\n" << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("step 3: --choices( acc_norm [0-9.]+ acc [0-9.]+ loss )([0-9.]+) "
                                                          "over 27 examples"))) << r.output;
    EXPECT_EQ(m[1].str(), expected_counts) << layout_name(l);
    EXPECT_NEAR(std::stod(m[2]), logged["choices_loss"].get<double>(), 1e-4) << layout_name(l);  // printed to 4 decimals
  }
}

}  // namespace
}  // namespace tessera
