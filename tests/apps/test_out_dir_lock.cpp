// Two runs into one --out-dir: the second is refused at start-up, naming the first (under mpirun
// too, every rank ending without a hang), and the first trains on untouched; --eval-only, which
// writes nothing, may score the folder meanwhile.
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

const std::string kTessera = std::string(TESSERA_EXE);

TEST(OutDirLock, ASecondRunIntoTheFolderIsRefusedWhileTheFirstTrains) {
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 4).string();
  const fs::path run = dir / "run";
  const std::string train = "env OMP_NUM_THREADS=1 " + kTessera +
                            " train --quiet --model gpt2-tiny --device cpu --batch-size 2 --seq-len 16 --train-data " +
                            shard + " --out-dir " + run.string() + " --resume";
  const std::string second = "env OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 " + kTessera +
                             " train --quiet --model gpt2-tiny --device cpu --batch-size 2 --seq-len 16 --dp 2 "
                             "--train-data " + shard + " --out-dir " + run.string() + " --resume";
  // The first saves at step 2, then trains until stopped; the others start once it saved.
  const testing::CommandResult out = testing::run_command(
      "( " + train + " --steps 1000000 --checkpoint-every 2 > " + (dir / "first.log").string() +
      " 2>&1 & pid=$!; while [ ! -e " + (run / "ckpt-latest").string() + " ]; do sleep 0.02; done; " + train +
      " --steps 3; echo \"alone=$?\"; " + second + " --steps 3; echo \"mpirun=$?\"; " + train +
      " --steps 1000000 --eval-only --val-data " + shard + "; echo \"eval=$?\"; kill -TERM $pid; wait $pid; echo \"first=$?\" )");
  const std::string refused = "is in use by another run (pid ";
  EXPECT_TRUE(testing::contains(out.output, "alone=1")) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "mpirun=1")) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "eval=0")) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "first=0")) << out.output;
  // Once by the lone run and once by the mpirun job's rank 0; its rank 1 stays quiet.
  size_t count = 0;
  for (size_t at = out.output.find(refused); at != std::string::npos; at = out.output.find(refused, at + 1)) ++count;
  EXPECT_EQ(count, 2u) << out.output;
  // The first run's metrics hold its own steps alone, 1, 2, 3, ... in order.
  const auto lines = testing::read_metrics(run / "metrics.jsonl");
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["step"].get<int64_t>(), int64_t(i) + 1);
}

}  // namespace
}  // namespace tessera
