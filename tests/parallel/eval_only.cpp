// `train --eval-only`: a run trained in one process, validated again by its checkpoint under
// tp2 x pp2 on 4 ranks, prints the val_loss the run logged at that step (the same batches, another
// layout) and leaves the run folder as it was; without --val-data it is refused in one line.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tessera
