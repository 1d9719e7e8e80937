// `tessera bench comm` end to end: under mpirun with two ranks it prints one table (from rank 0)
// with a row per op and size, collectives or p2p; bad flags, p2p in a world of one and a NCCL
// request without a GPU end with one line. `bench train` under mpirun is refused.
#include <gtest/gtest.h>

#include "parallel/nccl_comm.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(BenchCli, TwoRanksPrintOneTable) {
  CommandResult run = run_command(TESSERA_MPI_LAUNCH " -np 2 " TESSERA_EXE
                                                     " bench comm --min-bytes 1K --max-bytes 4K --iters 2 --warmup 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(occurrences(run.output, "# tessera bench comm: mpi backend, 2 rank(s) (mpirun)"), 1u) << run.output;
  EXPECT_EQ(occurrences(run.output, "      all_reduce          1024           256"), 1u) << run.output;
  EXPECT_EQ(occurrences(run.output, "  reduce_scatter          4096          1024"), 1u) << run.output;
  EXPECT_EQ(occurrences(run.output, "      all_gather"), 3u) << run.output;
}

TEST(BenchCli, TwoRanksPrintPointToPointRows) {
  CommandResult run = run_command(TESSERA_MPI_LAUNCH " -np 2 " TESSERA_EXE
                                                     " bench comm --op p2p --min-bytes 1K --max-bytes 4K --iters 2 "
                                                     "--warmup 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(occurrences(run.output, "# p2p: ranks 0-1, 2-3, ... ping-pong, all pairs at once; a call is a round trip"),
            1u)
      << run.output;
  EXPECT_EQ(occurrences(run.output, "             p2p          1024           256"), 1u) << run.output;
  EXPECT_EQ(occurrences(run.output, "             p2p          4096          1024"), 1u) << run.output;
  EXPECT_EQ(occurrences(run.output, "             p2p"), 3u) << run.output;
  EXPECT_EQ(occurrences(run.output, "# average busbw p2p: "), 1u) << run.output;
  EXPECT_FALSE(contains(run.output, "all_reduce")) << run.output;
}

// bench train times one process: under mpirun every rank would print a report of its own.
TEST(BenchCli, TrainUnderMpirunIsRefused) {
  CommandResult run = run_command(TESSERA_MPI_LAUNCH " -np 2 " TESSERA_EXE
                                                     " bench train --model gpt2-tiny --seq-len 16 --steps 1 --warmup 0");
  EXPECT_NE(run.exit_code, 0) << run.output;
  const std::string refusal = "bench train times one process's training step, but the launcher started 2";
  EXPECT_TRUE(contains(run.output, refusal)) << run.output;
  EXPECT_EQ(run.output.find(refusal), run.output.rfind(refusal)) << "printed by each rank:\n" << run.output;
  EXPECT_FALSE(contains(run.output, "ms/step")) << run.output;  // no rank timed a step
}

TEST(BenchCli, BadRequestsEndWithOneLine) {
  CommandResult run = run_command(TESSERA_EXE " bench comm --max-bytes 12X");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(contains(run.output,
                       "tessera: error: --max-bytes: '12X' is not a size; give bytes with an optional "
                       "K, M or G suffix (1K = 1024)\n"))
      << run.output;
  EXPECT_EQ(occurrences(run.output, "error"), 1u) << run.output;
  run = run_command(TESSERA_EXE " bench comm --op p2p");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(contains(run.output,
                       "tessera: error: --op p2p needs at least 2 ranks (this run has 1); launch with mpirun -np 2 "
                       "or more\n"))
      << run.output;
  EXPECT_EQ(occurrences(run.output, "error"), 1u) << run.output;
  run = run_command(TESSERA_EXE " bench comm --op broadcast");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(contains(run.output, "--op")) << run.output;
  if (!cuda_device_available()) {
    run = run_command(TESSERA_EXE " bench comm --backend nccl");
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_TRUE(contains(run.output,
                         "tessera: error: --backend nccl needs a CUDA GPU and this machine has none; "
                         "use --backend mpi\n"))
        << run.output;
    EXPECT_EQ(occurrences(run.output, "error"), 1u) << run.output;
  }
}

}  // namespace
}  // namespace tessera::testing
