// `tessera train` under mpirun with bad launches: a layout that does not match the world, ranks
// started with different configurations, pipeline, expert and context layouts that do not fit the
// model or the batch or combine in ways not implemented yet. Each ends with exit 2 (a refusal, which
// tessera launch does not restart), quickly, with exactly one "tessera: error" line (from rank 0)
// naming the problem — never a hang.
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {

class LaunchErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = testing::scratch_dir();
    shard = testing::write_random_shard(dir, 4096, 256, 5).string();
  }
  std::string train(const std::string& flags) const {
    return std::string(TESSERA_EXE) + " train --quiet --model gpt2-tiny --batch-size 4 --seq-len 16 --steps 2" +
           " --comm-timeout 20 --train-data " + shard + " --out-dir " + (dir / "run").string() + " " + flags;
  }
  void expect_one_error(const std::string& mpirun_args, const std::string& needle) const {
    testing::CommandResult r = testing::run_command("OMP_NUM_THREADS=1 timeout 90 mpirun --oversubscribe "
                                                    "--allow-run-as-root " + mpirun_args);
    // Refused as a bad flag is (exit 2), so that `tessera launch` does not restart the job.
    EXPECT_EQ(r.exit_code, 2) << r.output;
    size_t count = 0;
    for (size_t at = r.output.find("tessera: error: "); at != std::string::npos;
         at = r.output.find("tessera: error: ", at + 1))
      ++count;
    EXPECT_EQ(count, 1u) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "'" << needle << "' not in: " << r.output;
  }
  std::filesystem::path dir;
  std::string shard;
};

}  // namespace

TEST_F(LaunchErrors, LayoutThatDoesNotMatchTheWorld) { expect_one_error("-np 2 " + train("--dp 3"), "--dp 3"); }

TEST_F(LaunchErrors, BatchThatTheDataParallelDegreeDoesNotDivide) {
  expect_one_error("-np 4 " + train("--batch-size 6 --micro-batch-size 1"), "--batch-size");
}

TEST_F(LaunchErrors, DeviceCommThatCannotBeHad) {
  expect_one_error("-np 2 " + train("--device cpu --device-comm nccl"), "--device-comm nccl moves GPU tensors");
  expect_one_error("-np 2 " + train("--device-comm fast"), "--device-comm must be auto, nccl or host");
}

TEST_F(LaunchErrors, RanksWithDifferentConfigurations) {
  expect_one_error("-np 1 " + train("--lr 1e-3") + " : -np 1 " + train("--lr 2e-3"), "different configurations");
  // Flags that change what ranks send each other or how replicas round: each rank would go its own way.
  expect_one_error("-np 1 " + train("") + " : -np 1 " + train("--optimizer-moments bf16"), "different configurations");
  expect_one_error("-np 1 " + train("") + " : -np 1 " + train("--grad-reduce-dtype bf16"), "different configurations");
  // Flags that decide when ranks meet or where they write: a rank of its own would wait forever on
  // an evaluation or a bucket the others never start, or save its shards into another folder.
  expect_one_error("-np 1 " + train("--eval-every 2") + " : -np 1 " + train(""), "different configurations");
  expect_one_error("-np 1 " + train("--bucket-mb 1") + " : -np 1 " + train(""), "different configurations");
  expect_one_error("-np 1 " + train("--zero 3") + " : -np 1 " + train("--zero 3 --no-reshard-after-forward"),
                   "different configurations");
  expect_one_error("-np 1 " + train("--out-dir " + (dir / "elsewhere").string()) + " : -np 1 " + train(""),
                   "different configurations");
}

TEST_F(LaunchErrors, ContextParallelLayoutsThatDoNotFit) {
  // gpt2-tiny's 2 heads do not split over 4 ranks, nor a tp rank's 1 head over 2.
  expect_one_error("-np 4 " + train("--cp 4 --dp 1 --cp-comm all-to-all"),
                   "--cp-comm all-to-all gives each of the --cp 4 ranks an equal share of the 2 query and 2 key/value heads");
  expect_one_error("-np 4 " + train("--cp 2 --tp 2 --dp 1 --cp-comm all-to-all"), "a tp rank's 1 query and 1 key/value");
  expect_one_error("-np 4 " + train("--cp 4 --dp 1 --seq-len 12"), "--seq-len 12 is not a multiple of 2 × --cp 4 = 8");
  expect_one_error("-np 2 " + train("--model mixtral-tiny --cp 2 --dp 1 --moe-capacity-factor 1.5"),
                   "--cp 2 with --moe-capacity-factor 1.5 is not implemented");
}

// gpt2-tiny: 2 heads, 32 channels, MLP 128, vocabulary padded to 256.
TEST_F(LaunchErrors, TensorParallelDegreesThatDoNotDivideTheModel) {
  expect_one_error("-np 4 " + train("--tp 4 --dp 1"), "--tp 4 does not divide the model's 2 attention heads");
  // The world size first: no --seq-len (16 here, not a multiple of 3) would mend it.
  expect_one_error("-np 2 " + train("--tp 3 --dp 1"), "--dp 1 × --tp 3");
  expect_one_error("-np 2 " + train("--tp 2 --dp 1 --seq-len 15"),  // an odd length is fine but for this split
                   "sequence parallelism splits each sequence's 15 positions over --tp 2 ranks");
}

// mixtral-tiny has 4 experts; gpt2-tiny none.
TEST_F(LaunchErrors, ExpertParallelLayoutsThatDoNotFit) {
  expect_one_error("-np 2 " + train("--ep 2"), "--ep 2 needs a MoE model");
  expect_one_error("-np 3 " + train("--model mixtral-tiny --ep 3"), "--ep 3 does not divide the model's 4 experts");
  expect_one_error("-np 4 " + train("--model mixtral-tiny --tp 2 --ep 4"),
                   "--ep 4 does not divide --dp 2 (expert groups are carved out of the data-parallel ranks)");
}

// gpt2-tiny has 2 blocks; --batch-size 4 with --micro-batch-size 1 is 4 micro-batches a step.
TEST_F(LaunchErrors, PipelineLayoutsThatDoNotFit) {
  expect_one_error("-np 4 " + train("--pp 4 --dp 1"), "--pp 4 is more than the model's 2 layers");
  expect_one_error("-np 2 " + train("--pp 2 --dp 1 --virtual-stages 2 --pipeline-schedule interleaved"),
                   "use at most 2 chunks");
  expect_one_error("-np 2 " + train("--pp 2 --dp 1 --virtual-stages 2 --layers 4"),
                   "--virtual-stages 2 needs the interleaved schedule");
  expect_one_error("-np 2 " + train("--pp 2 --dp 1 --layers 4 --virtual-stages 2 --pipeline-schedule interleaved "
                                    "--micro-batch-size 4"),
                   "--batch-size 4 / (--dp 1 × --micro-batch-size 4) = 1; use --micro-batch-size 2");
  expect_one_error("-np 2 " + train("--pp 2 --dp 1 --layers 4 --pipeline-boundaries 1,2"),
                   "--pipeline-boundaries gives 2 boundaries, but 2 chunks");
  expect_one_error("-np 2 " + train("--pp 2 --dp 1 --layers 4 --pipeline-boundaries 4"), "below the model's 4 blocks");
  expect_one_error("-np 2 " + train("--pp 2 --dp 1 --pipeline-schedule 2f2b"), "'2f2b' is not a schedule");
  expect_one_error("-np 2 " + train("--virtual-stages 2"), "give --pp above 1 with them");
}

}  // namespace tessera
