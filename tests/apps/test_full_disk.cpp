// Storage that fails a run. A save that does not fit (a file-size limit stands in for a full disk):
// the run stops with one line naming the checkpoint, its folder, the bytes it needed and had, and the
// checkpoint a resume continues from, which is left whole: a resume with room trains on from it. A
// shard that the storage stops serving mid-run (here: truncated while mapped): one line, exit 1.
#include <gtest/gtest.h>

#include "checkpoint/run_folder.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

TEST(FullDisk, AFailedSaveNamesItsBytesAndLeavesThePreviousCheckpoint) {
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 6).string();
  const fs::path run = dir / "run";
  const std::string train = std::string(TESSERA_EXE) +
                            " train --quiet --model gpt2-tiny --device cpu --batch-size 2 --seq-len 16 --train-data " +
                            shard + " --out-dir " + run.string() + " --checkpoint-every 1 --resume --steps ";
  ASSERT_EQ(testing::run_command("OMP_NUM_THREADS=1 " + train + "2").exit_code, 0);
  // 100 blocks (51 or 102 KB, by the shell) hold the metrics but not the weights (about 150 KB).
  const testing::CommandResult full =
      testing::run_command("OMP_NUM_THREADS=1 sh -c \"trap '' XFSZ; ulimit -f 100; exec " + train + "4\"");
  EXPECT_EQ(full.exit_code, 1) << full.output;
  for (const std::string& part :
       {"saving checkpoint ckpt-00000003 in '" + run.string() + "': this rank's part holds ",
        std::string(" bytes were free there when it began (cannot write "), std::string("File too large"),
        std::string("ckpt-00000002 is untouched and --resume continues from it; free space, then resume")})
    EXPECT_TRUE(testing::contains(full.output, part)) << full.output;
  EXPECT_EQ(fs::read_symlink(run / kLatestCheckpoint), fs::path("ckpt-00000002"));
  const testing::CommandResult resumed = testing::run_command("OMP_NUM_THREADS=1 " + train + "4");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(testing::read_metrics(run / "metrics.jsonl").back()["step"].get<int64_t>(), 4);
  EXPECT_EQ(fs::read_symlink(run / kLatestCheckpoint), fs::path("ckpt-00000004"));
}

TEST(FullDisk, AShardThatShrinksMidRunEndsItWithOneLineNamingIt) {
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 1 << 20, 256, 6).string();
  const testing::CommandResult out = testing::run_command(
      "( OMP_NUM_THREADS=1 timeout 60 " + std::string(TESSERA_EXE) + " train --quiet --model gpt2-tiny --device cpu "
      "--batch-size 4 --seq-len 16 --steps 1000000 --data-order sequential --train-data " + shard + " --out-dir " +
      (dir / "run").string() + " & pid=$!; while [ \"$(cat " + (dir / "run" / "metrics.jsonl").string() +
      " 2>/dev/null | wc -l)\" -lt 2 ]; do sleep 0.02; done; truncate -s 4096 " + shard + "; wait $pid; "
      "echo \"exit=$?\" )");
  EXPECT_TRUE(testing::contains(out.output, "exit=1")) << out.output;
  EXPECT_TRUE(testing::contains(out.output, "tessera: error: cannot read shard " + shard +
                                                ": a read through its memory mapping failed (SIGBUS)"))
      << out.output;
}

}  // namespace
}  // namespace tessera
