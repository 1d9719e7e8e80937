// A rank that dies or hangs never hangs the job: launched under mpirun with a 2 s communicator
// timeout, the job ends non-zero within the timeout plus a margin. When the rank hangs (stopped),
// the others' error names the collective and the missing rank; when it dies, mpirun may end the
// job first, and if our error comes out it must name the dead rank too.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "support/test_support.h"

namespace tessera::testing {
namespace {

constexpr double kTimeout = 2.0;
constexpr double kMargin = 15.0;  // mpirun start-up and tear-down on a loaded machine

struct JobResult {
  CommandResult command;
  double seconds = 0;
};

JobResult run_job(const std::string& mode) {
  // `timeout` is only a guard for this test: if it fires, the job hung and the test fails.
  std::string line = "timeout -k 5 90 " TESSERA_MPI_LAUNCH " -np 4 " TESSERA_RANK_FAILURE_JOB " " + mode + " " +
                     std::to_string(kTimeout);
  auto start = std::chrono::steady_clock::now();
  JobResult result{run_command(line), 0};
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

TEST(RankFailure, StoppedRankIsNamedAndTheJobEnds) {
  JobResult job = run_job("stop");
  EXPECT_NE(job.command.exit_code, 0) << job.command.output;
  EXPECT_NE(job.command.exit_code, 124) << "the job hung\n" << job.command.output;
  EXPECT_LT(job.seconds, kTimeout + kMargin) << job.command.output;
  EXPECT_TRUE(contains(job.command.output, "tessera: error: comm 'world' (rank ")) << job.command.output;
  EXPECT_TRUE(contains(job.command.output,
                       "did not complete within 2 s; arrived: ranks 0, 1, 2; "
                       "not arrived: rank 3 (no answer: stuck or dead)"))
      << job.command.output;
}

TEST(RankFailure, KilledRankEndsTheJob) {
  JobResult job = run_job("kill");
  EXPECT_NE(job.command.exit_code, 0) << job.command.output;
  EXPECT_NE(job.command.exit_code, 124) << "the job hung\n" << job.command.output;
  EXPECT_LT(job.seconds, kTimeout + kMargin) << job.command.output;
  if (contains(job.command.output, "tessera: error:")) {
    EXPECT_TRUE(contains(job.command.output, "not arrived: rank 3")) << job.command.output;
  }
}

// A rank stuck before the job's communicators exist (stopped as it starts, so the others wait in
// MPI_Init, a collective with no timeout of its own) would hang `tessera train` for good; the start-up
// gives up after --comm-timeout too, and the job ends non-zero (tessera launch then restarts it).
TEST(RankFailure, ARankStuckInTheStartUpEndsTheJob) {
  const std::filesystem::path dir = scratch_dir();
  {  // a token shard: 256 int32 of header (magic, version 2, count), then uint32 tokens below 256
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 2, header[2] = 4096;
    std::vector<uint32_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(i * 37 % 256);
    std::ofstream out(dir / "train_000000.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), std::streamsize(header.size() * 4));
    out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 4));
  }
  const std::string run = (dir / "run").string();
  const std::string job = "timeout -k 5 40 " TESSERA_MPI_LAUNCH " -np 2 " TESSERA_EXE
                          " train --quiet --model gpt2-tiny --device cpu --batch-size 2 --seq-len 16 --steps 100000 "
                          "--comm-timeout " + std::to_string(int(kTimeout)) + " --train-data " +
                          (dir / "train_000000.bin").string() + " --out-dir " + run;
  const auto start = std::chrono::steady_clock::now();
  const CommandResult out = run_command(
      "( " + job + " & pid=$!; for i in $(seq 1 20000); do v=$(pgrep -f '^" TESSERA_EXE " train .*--out-dir " + run +
      "$' | head -1); [ -n \"$v\" ] && break; sleep 0.001; done; kill -STOP $v; wait $pid; echo \"exit=$?\"; "
      "kill -9 $v 2>/dev/null )");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(contains(out.output, "exit=0")) << out.output;
  EXPECT_FALSE(contains(out.output, "exit=124")) << "the job hung\n" << out.output;
  EXPECT_LT(seconds, kTimeout + kMargin) << out.output;
  EXPECT_TRUE(contains(out.output, "did not complete within 2 s")) << out.output;
}

}  // namespace
}  // namespace tessera::testing
