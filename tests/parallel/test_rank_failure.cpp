// A rank that dies or hangs never hangs the job: launched under mpirun with a 2 s communicator
// timeout, the job ends non-zero within the timeout plus a margin. When the rank hangs (stopped),
// the others' error names the collective and the missing rank; when it dies, mpirun may end the
// job first, and if our error comes out it must name the dead rank too.
#include <gtest/gtest.h>

#include <chrono>

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

}  // namespace
}  // namespace tessera::testing
